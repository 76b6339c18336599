-- Unregister a dataset version whose staged copies are gone or incomplete (staged again next).
DELETE FROM audit.datasets WHERE dataset_version = $dataset_version;
