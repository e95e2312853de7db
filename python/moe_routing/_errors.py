"""The exceptions of moe_routing.

Every failure raises ``moe_routing.Error`` (a ``RuntimeError``) or one of its subclasses, with the library's
text (``moe_last_error()``) or, for a check done in Python, a text naming the argument at fault:

- ``InvalidArgument(Error, ValueError)``: a size, shape, dtype of an output, memory space, stride or buffer the
  caller passed is not acceptable (``MOE_ERROR_INVALID_ARGUMENT``).
- ``Unsupported(Error, TypeError)``: a valid dtype this operation does not take, e.g. float ids
  (``MOE_ERROR_UNSUPPORTED``).
- ``BackendError(Error)``: the backend's runtime failed, e.g. no GPU visible (``MOE_ERROR_BACKEND``).
- ``NotAvailable(Error, NotImplementedError)``: the operation is not in this build of the library (its C
  function is newer than the ``routing.h`` the package was built from).

``status`` on each class is the ``moe_status_t`` value (``None`` for ``Error`` and ``NotAvailable``).
"""


class Error(RuntimeError):
    """Any failure of a moe_routing call."""

    status = None


class InvalidArgument(Error, ValueError):
    """MOE_ERROR_INVALID_ARGUMENT, or an array check in Python (dtype, shape, device, contiguity, capacity)."""

    status = 1


class Unsupported(Error, TypeError):
    """MOE_ERROR_UNSUPPORTED: a valid dtype this operation does not take."""

    status = 2


class BackendError(Error):
    """MOE_ERROR_BACKEND: the backend's runtime failed (no device, launch error, ...)."""

    status = 3


class NotAvailable(Error, NotImplementedError):
    """The operation is not part of this build of the library."""
