from sglang.srt.utils.common import human_readable_int, json_list_type, nullable_str

__all__ = ["human_readable_int", "json_list_type", "nullable_str"]
