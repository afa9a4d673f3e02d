"""Import lancedb without paying for its REST-namespace client up front.

`import lancedb` takes ~2.2 s on our 2-core machine, ~1.5 s of it in
`lance_namespace_urllib3_client/__init__.py`, which imports nine generated API classes whose
hundreds of `@validate_call` methods make pydantic build schemas at import time. We only open
local directories and never call a REST namespace, yet a one-shot `python -m
gitlab_knowledge.search` paid that on every query. So that package's `__init__` is deferred: its
submodules (the models lancedb does import) load normally, and the first access to anything the
package root would have defined runs the real `__init__` then — nothing is lost, only delayed.
If a future lancedb no longer imports cleanly this way, the plain import runs instead.
"""

import importlib.util
import os
import sys
import types
from typing import Any

_DEFERRED = "lance_namespace_urllib3_client"


def _defer_package_init(name: str) -> bool:
    if name in sys.modules:
        return False
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None or not spec.submodule_search_locations:
        return False
    loader = spec.loader
    stub = types.ModuleType(name)
    stub.__spec__ = spec
    stub.__path__ = list(spec.submodule_search_locations)
    stub.__file__ = spec.origin
    stub.__loader__ = spec.loader
    stub.__package__ = name

    def __getattr__(attr: str) -> Any:  # PEP 562: runs only for names not yet bound
        if attr.startswith("__"):
            raise AttributeError(attr)
        del stub.__dict__["__getattr__"]  # from here on, missing names fail normally
        loader.exec_module(stub)
        return getattr(stub, attr)

    stub.__getattr__ = __getattr__  # type: ignore[method-assign]  # a module's PEP 562 hook, not a method
    sys.modules[name] = stub
    return True


def import_lancedb() -> types.ModuleType:
    if "lancedb" in sys.modules:
        return sys.modules["lancedb"]
    # lance logs from Rust at warn level by default (e.g. a k-means warning per partition while
    # an index trains); a user's own LANCE_LOG still wins. It is read when lance loads.
    os.environ.setdefault("LANCE_LOG", "error")
    deferred = _defer_package_init(_DEFERRED)
    try:
        import lancedb
    except Exception:
        if not deferred:
            raise
        for name in [n for n in sys.modules if n.split(".")[0] in ("lancedb", "lance_namespace", _DEFERRED)]:
            del sys.modules[name]
        import lancedb
    return lancedb
