"""Pricing disparities among originated loans (engine ``pricing``)."""
