"""What a version decides about models, read from the unpacked wheel's source (never imported):
the quantization methods it knows, the architectures it loads natively, and the architectures
whose speculative draft it takes from the target checkpoint itself (MTP / NextN layers).

Standard library only (``ast``), run on the host side after the wheel is unpacked. Every reader
fails the build, naming the file, when the source no longer has the shape it reads: a catalog
never carries a guess.

- ``quantization_methods``: the keys of ``QUANTIZATION_METHODS`` in
  ``sglang/srt/layers/quantization/__init__.py`` as a CUDA host builds it (the
  ``BASE_QUANTIZATION_METHODS`` literal, plus each module-level ``.update({...})`` whose ``if``
  holds on CUDA: ``is_cuda()`` true, every other platform probe false).
  ``configs/model_config.py ModelConfig._verify_quantization`` refuses any other method
  ("Unknown quantization method").
- ``model_architectures``: every ``EntryClass`` of the modules directly under
  ``sglang/srt/models/`` (``models/registry.py import_model_classes`` registers them by class name).
- ``speculative``: ``default_draft_path`` lists the architectures whose missing
  ``--speculative-draft-model-path`` SGLang sets to the model path (0.5.9:
  ``server_args.py ServerArgs._handle_speculative_decoding``; later
  ``arg_groups/speculative_hook.py _handle_eagle_family``); ``draft_architectures`` maps each
  architecture ``configs/model_config.py ModelConfig._config_draft_model`` rewrites for the draft
  worker to its draft class, and ``assumed_one_layer`` lists those for which it sets
  ``num_nextn_predict_layers = 1`` itself (the config need not name a layer count).
"""

from __future__ import annotations

import ast
from pathlib import Path

QUANT_INIT = "sglang/srt/layers/quantization/__init__.py"
MODELS_DIR = "sglang/srt/models"
MODEL_CONFIG = "sglang/srt/configs/model_config.py"
EAGLE_SOURCES = (
    ("sglang/srt/arg_groups/speculative_hook.py", "_handle_eagle_family"),
    ("sglang/srt/server_args.py", "_handle_speculative_decoding"),
)


class SourceShapeError(SystemExit):
    pass


def _parse(src: Path, rel: str) -> ast.Module:
    path = src / rel
    if not path.is_file():
        raise SourceShapeError(f"{rel}: not in the wheel")
    return ast.parse(path.read_text(encoding="utf-8-sig"), filename=rel)


def _on_cuda(test: ast.expr) -> bool:
    """Whether a module-level ``if`` test holds on a CUDA host: ``is_cuda()`` is true, every other
    call or name (is_hip, is_npu, is_cpu, is_xpu, is_mps, _is_gfx95_supported, ...) false."""
    if isinstance(test, ast.BoolOp):
        values = [_on_cuda(v) for v in test.values]
        return any(values) if isinstance(test.op, ast.Or) else all(values)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return not _on_cuda(test.operand)
    if isinstance(test, ast.Call) and isinstance(test.func, ast.Name):
        return test.func.id == "is_cuda"
    return False


def _str_keys(node: ast.expr, rel: str) -> list[str]:
    if not isinstance(node, ast.Dict) or not all(isinstance(k, ast.Constant) and isinstance(k.value, str)
                                                 for k in node.keys):
        raise SourceShapeError(f"{rel}: expected a dict literal with string keys at line {node.lineno}")
    return [k.value for k in node.keys]  # type: ignore[union-attr]


def quantization_methods(src: Path) -> list[str]:
    if _function(_parse(src, MODEL_CONFIG), "_verify_quantization") is None:
        raise SourceShapeError(f"{MODEL_CONFIG}: no ModelConfig._verify_quantization")
    tree = _parse(src, QUANT_INIT)
    methods: list[str] = []
    final = False
    for stmt in tree.body:
        target = None
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            target, value = stmt.target.id, stmt.value
        elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            target, value = stmt.targets[0].id, stmt.value
        if target == "BASE_QUANTIZATION_METHODS" and value is not None:
            methods = _str_keys(value, QUANT_INIT)
        elif target == "QUANTIZATION_METHODS":
            ok = (isinstance(value, ast.Dict) and value.keys == [None]
                  and isinstance(value.values[0], ast.Name) and value.values[0].id == "BASE_QUANTIZATION_METHODS")
            if not ok:
                raise SourceShapeError(f"{QUANT_INIT}: QUANTIZATION_METHODS is no longer "
                                       "{**BASE_QUANTIZATION_METHODS}")
            final = True
        elif isinstance(stmt, ast.If) and _on_cuda(stmt.test):
            for inner in stmt.body:
                call = inner.value if isinstance(inner, ast.Expr) else None
                if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                        and call.func.attr == "update" and isinstance(call.func.value, ast.Name)
                        and call.func.value.id == "BASE_QUANTIZATION_METHODS"):
                    methods += [m for m in _str_keys(call.args[0], QUANT_INIT) if m not in methods]
    if not methods or not final:
        raise SourceShapeError(f"{QUANT_INIT}: no BASE_QUANTIZATION_METHODS / QUANTIZATION_METHODS found")
    return sorted(set(methods))


def _entry_names(module: ast.Module) -> list[str]:
    """The class names of a model module's ``EntryClass`` (an alias ``X = Y`` resolved to Y)."""
    aliases = {s.targets[0].id: s.value.id for s in module.body
               if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
               and isinstance(s.value, ast.Name)}
    for stmt in module.body:
        if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
                and stmt.targets[0].id == "EntryClass"):
            value = stmt.value
            items = value.elts if isinstance(value, (ast.List, ast.Tuple)) else [value]
            names = []
            for item in items:
                if isinstance(item, ast.Name):
                    names.append(aliases.get(item.id, item.id))
                elif isinstance(item, ast.Attribute):
                    names.append(item.attr)
            return names
    return []


def model_architectures(src: Path) -> list[str]:
    folder = src / MODELS_DIR
    if not folder.is_dir():
        raise SourceShapeError(f"{MODELS_DIR}: not in the wheel")
    names: set[str] = set()
    for path in sorted(folder.glob("*.py")):
        names.update(_entry_names(ast.parse(path.read_text(encoding="utf-8-sig"), filename=str(path.name))))
    if not names:
        raise SourceShapeError(f"{MODELS_DIR}: no EntryClass found")
    return sorted(names)


def _function(tree: ast.Module, name: str) -> ast.FunctionDef | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    return None


def _module_tuples(tree: ast.Module) -> dict[str, list[str]]:
    out = {}
    for s in tree.body:
        if (isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
                and isinstance(s.value, (ast.List, ast.Tuple))
                and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in s.value.elts)):
            out[s.targets[0].id] = [e.value for e in s.value.elts]  # type: ignore[attr-defined]
    return out


def _strings(node: ast.expr, names: dict[str, list[str]]) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    if isinstance(node, ast.Name):
        return names.get(node.id, [])
    return []


def _is_arch0(node: ast.expr) -> bool:
    """``self.hf_config.architectures[0]``."""
    return (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute)
            and node.value.attr == "architectures")


def _arch_test(test: ast.expr, names: dict[str, list[str]]) -> list[str]:
    found: list[str] = []
    for node in ast.walk(test):
        if isinstance(node, ast.Compare) and _is_arch0(node.left) and isinstance(node.ops[0], (ast.Eq, ast.In)):
            found += _strings(node.comparators[0], names)
    return found


def _draft_class(body: list[ast.stmt]) -> tuple[str | None, bool]:
    """What an ``if`` body of _config_draft_model rewrites the architecture to, and whether it
    sets num_nextn_predict_layers = 1 itself."""
    cls, one = None, False
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            t = node.targets[0]
            if _is_arch0(t) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                cls = cls or node.value.value
            elif (isinstance(t, ast.Attribute) and t.attr == "architectures"
                  and isinstance(node.value, ast.List) and node.value.elts
                  and isinstance(node.value.elts[0], ast.Constant)):
                cls = cls or node.value.elts[0].value
            elif (isinstance(t, ast.Attribute) and t.attr == "num_nextn_predict_layers"
                  and isinstance(node.value, ast.Constant) and node.value.value == 1):
                one = True
    return cls, one


def speculative(src: Path) -> dict:
    tree = _parse(src, MODEL_CONFIG)
    names = _module_tuples(tree)
    fn = _function(tree, "_config_draft_model")
    if fn is None:
        raise SourceShapeError(f"{MODEL_CONFIG}: no _config_draft_model")
    drafts: dict[str, str] = {}
    assumed: set[str] = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.If):
            archs = _arch_test(node.test, names)
            cls, one = _draft_class(node.body)
            if not archs or cls is None:
                continue
            for arch in archs:
                drafts.setdefault(arch, cls)
                if one:
                    assumed.add(arch)
    if not drafts:
        raise SourceShapeError(f"{MODEL_CONFIG}: _config_draft_model rewrites no architecture")
    default_path: list[str] | None = None
    where = None
    for rel, func in EAGLE_SOURCES:
        if not (src / rel).is_file():
            continue
        f = _function(_parse(src, rel), func)
        if f is None:
            continue
        for node in ast.walk(f):
            if (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
                    and isinstance(node.test.left, ast.Name) and node.test.left.id == "model_arch"
                    and isinstance(node.test.ops[0], ast.In)
                    and "speculative_draft_model_path" in ast.dump(ast.Module(body=node.body, type_ignores=[]))):
                default_path = _strings(node.test.comparators[0], {})
                where = f"{rel.removeprefix('sglang/')} {func}"
                break
        if default_path is not None:
            break
    if not default_path:
        raise SourceShapeError("no model_arch list that defaults the draft model path (speculative_hook.py "
                               "_handle_eagle_family / server_args.py _handle_speculative_decoding)")
    return {
        "default_draft_path": sorted(set(default_path)),
        "default_draft_path_source": where,
        "draft_architectures": dict(sorted(drafts.items())),
        "assumed_one_layer": sorted(assumed),
        "draft_source": f"{MODEL_CONFIG.removeprefix('sglang/')} ModelConfig._config_draft_model",
    }


def read_sources(src: Path) -> dict:
    """The catalog's ``model_support`` section for the unpacked wheel at ``src``."""
    return {
        "quantization_methods": quantization_methods(src),
        "quantization_source": f"{QUANT_INIT.removeprefix('sglang/')} QUANTIZATION_METHODS (CUDA); "
                               "configs/model_config.py ModelConfig._verify_quantization",
        "model_architectures": model_architectures(src),
        "model_architectures_source": "srt/models/*.py EntryClass (models/registry.py import_model_classes)",
        "speculative": speculative(src),
    }
