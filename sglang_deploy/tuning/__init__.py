"""Tuning: what `sglang-deploy tune` measured, remembered per hardware class (``record``)."""

from .record import (FORMAT, OBJECTIVES, HardwareClass, TuningError, TuningRecord, hardware_class, load_records,
                     match, records_path, save_record)

__all__ = ["FORMAT", "OBJECTIVES", "HardwareClass", "TuningError", "TuningRecord", "hardware_class", "load_records",
           "match", "records_path", "save_record"]
