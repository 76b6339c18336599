"""aequum's engines. Importing the package registers every engine's parameters with the spec
(``engines.registry``), so any spec validation sees all of them."""
from aequum.engines import registry as _registry  # noqa: F401  (registration side effect)
