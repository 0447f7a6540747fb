"""Module attributes that load on first use (PEP 562), for packages whose
import must stay cheap: the top-level package and the SGLang integration
(both imported at Python start-up by the start-up hook)."""


def lazy_attributes(package: str, table: dict):
    """__getattr__ and __dir__ for `package`, whose names in `table` live in
    the submodule the table names (relative to the package)."""
    import sys

    def __getattr__(name):
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        import importlib
        value = getattr(importlib.import_module(f".{module}", package), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__():
        return sorted(list(vars(sys.modules[package])) + list(table))

    return __getattr__, __dir__
