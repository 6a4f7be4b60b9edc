"""NVML's exceptions: the class hierarchy nvidia-ml-py (pynvml.py) generates, one
``NVMLError_<Name>`` subclass per ``NVML_ERROR_<NAME>`` code."""

from __future__ import annotations

import string
import sys

from . import _constants
from ._constants import (
    NVML_ERROR_ALREADY_INITIALIZED, NVML_ERROR_CORRUPTED_INFOROM, NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_FUNCTION_NOT_FOUND, NVML_ERROR_GPU_IS_LOST, NVML_ERROR_IN_USE, NVML_ERROR_INSUFFICIENT_POWER,
    NVML_ERROR_INSUFFICIENT_SIZE, NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_IRQ_ISSUE,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH, NVML_ERROR_LIBRARY_NOT_FOUND, NVML_ERROR_MEMORY, NVML_ERROR_NO_DATA,
    NVML_ERROR_NO_PERMISSION, NVML_ERROR_NOT_FOUND, NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_OPERATING_SYSTEM,
    NVML_ERROR_RESET_REQUIRED, NVML_ERROR_TIMEOUT, NVML_ERROR_UNINITIALIZED, NVML_ERROR_UNKNOWN,
)

#: The package these classes belong to (``pynvml``), as their ``__module__`` says.
PACKAGE = __name__.rpartition(".")[0]


class NVMLError(Exception):
    _valClassMapping: dict[int, type] = dict()
    _errcode_to_string = {
        NVML_ERROR_UNINITIALIZED: "Uninitialized",
        NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
        NVML_ERROR_NOT_SUPPORTED: "Not Supported",
        NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
        NVML_ERROR_ALREADY_INITIALIZED: "Already Initialized",
        NVML_ERROR_NOT_FOUND: "Not Found",
        NVML_ERROR_INSUFFICIENT_SIZE: "Insufficient Size",
        NVML_ERROR_INSUFFICIENT_POWER: "Insufficient External Power",
        NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
        NVML_ERROR_TIMEOUT: "Timeout",
        NVML_ERROR_IRQ_ISSUE: "Interrupt Request Issue",
        NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
        NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
        NVML_ERROR_CORRUPTED_INFOROM: "Corrupted infoROM",
        NVML_ERROR_GPU_IS_LOST: "GPU is lost",
        NVML_ERROR_RESET_REQUIRED: "GPU requires restart",
        NVML_ERROR_OPERATING_SYSTEM: "The operating system has blocked the request.",
        NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
        NVML_ERROR_IN_USE: "In Use",
        NVML_ERROR_MEMORY: "Insufficient Memory",
        NVML_ERROR_NO_DATA: "No Data",
        NVML_ERROR_UNKNOWN: "Unknown Error",
    }

    def __new__(typ, value):
        if typ == NVMLError:
            typ = NVMLError._valClassMapping.get(value, typ)
        obj = Exception.__new__(typ)
        obj.value = value
        return obj

    def __str__(self):
        return NVMLError._errcode_to_string.get(self.value, "NVML Error with code %d" % self.value)

    def __eq__(self, other):
        return self.value == other.value


class NVMLLibraryMismatchError(Exception):
    pass


def nvmlExceptionClass(nvmlErrorCode):
    if nvmlErrorCode not in NVMLError._valClassMapping:
        raise ValueError("nvmlErrorCode %s is not valid" % nvmlErrorCode)
    return NVMLError._valClassMapping[nvmlErrorCode]


def _extractNVMLErrorsAsClasses():
    this_module = sys.modules[__name__]
    for err_name in _constants.names("NVML_ERROR_"):
        class_name = "NVMLError_" + string.capwords(err_name.replace("NVML_ERROR_", ""), "_").replace("_", "")
        err_val = getattr(_constants, err_name)

        def gen_new(val):
            def new(typ, *args):
                return NVMLError.__new__(typ, val)
            return new

        new_error_class = type(class_name, (NVMLError,), {"__new__": gen_new(err_val)})
        new_error_class.__module__ = PACKAGE
        setattr(this_module, class_name, new_error_class)
        NVMLError._valClassMapping[err_val] = new_error_class


_extractNVMLErrorsAsClasses()


def error_classes() -> dict[str, type]:
    """The generated ``NVMLError_*`` classes by name."""
    return {name: value for name, value in vars(sys.modules[__name__]).items() if name.startswith("NVMLError_")}

