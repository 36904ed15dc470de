"""Lets PyTorch's suites run against any sub-plugin: a sample that needs a dtype the active plugin
declares unsupported (its `supported_dtypes` with the "error" policy) is skipped, not failed,
because refusing it with a TypeError is the plugin's documented behaviour."""


def is_unsupported_dtype_error(e: BaseException) -> bool:
    return isinstance(e, TypeError) and "device does not support torch." in str(e)
