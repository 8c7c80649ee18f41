#!/usr/bin/env python3
"""Writes the fuzzers' seed corpora into fuzz/corpus/<target>/: real files (the shipped model's and the parity
fixtures' configs and tokenizers, problem files from `moex experts make-problem`, safetensors files of every dtype)
and mutated ones (each a malformed case the readers must refuse: truncated, overlapping offsets, NUL padding,
duplicate keys, deep nesting, wrong types). Files named regress_* are inputs the fuzzers found, kept by hand.
Usage: python3 fuzz/make_corpus.py BUILD_DIR/moex"""
import json
import pathlib
import struct
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fuzz" / "corpus"


def put(target, name, data):
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data if isinstance(data, bytes) else data.encode())


def safetensors(tensors, metadata=None, pad=b" "):
    """tensors: [(name, dtype, shape, bytes)] laid out in order; the header padded to a multiple of 8 with `pad`."""
    header, offset = {}, 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += pad * ((8 - (8 + len(text)) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(t[3] for t in tensors)


def safetensors_seeds():
    f32 = struct.pack("<4f", 1.0, -2.0, 0.5, 3.0)
    put("safetensors", "f32_2x2", safetensors([("w", "F32", [2, 2], f32)], {"format": "pt"}))
    put("safetensors", "dtypes", safetensors([("a", "BF16", [2], b"\x80\x3f\x00\x40"), ("b", "F16", [1], b"\x00\x3c"),
                                              ("c", "I64", [1], struct.pack("<q", -5)), ("d", "U8", [3], b"\x01\x02\x03"),
                                              ("e", "F8_E4M3", [2], b"\x38\x40"), ("f", "F4", [4], b"\x12\x34"),
                                              ("g", "BOOL", [1], b"\x01")]))
    put("safetensors", "empty_and_scalar", safetensors([("empty", "F32", [0, 3], b""), ("s", "F64", [], b"\0" * 8)]))
    put("safetensors", "no_tensors", safetensors([], {"k": "v"}))
    good = safetensors([("w", "F32", [2, 2], f32)])
    put("safetensors", "bad_truncated", good[:-3])
    put("safetensors", "bad_trailing", good + b"xx")
    put("safetensors", "bad_nul_padding", safetensors([("w", "F32", [2, 2], f32)], pad=b"\0"))
    header = b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}'
    put("safetensors", "bad_overlap", struct.pack("<Q", len(header)) + header + b"\0" * 12)
    header = b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}'
    put("safetensors", "bad_duplicate", struct.pack("<Q", len(header)) + header + b"\0" * 8)
    put("safetensors", "bad_length", struct.pack("<Q", 2**63) + b"{}")


def problem_seeds(moex):
    with tempfile.TemporaryDirectory() as tmp:
        variants = {
            "f32": ["--dtype", "f32"], "bf16_bias": ["--dtype", "bf16", "--bias"],
            "transposed_i64": ["--transposed", "--index-dtype", "i64", "--dtype", "f16"],
            "ungated_gelu": ["--ungated", "--activation", "gelu"], "gpt_oss": ["--gate", "gpt_oss", "--interleaved"],
            "fp8_block": ["--quant", "fp8_block", "--block", "none"],
        }
        for name, extra in variants.items():
            out = pathlib.Path(tmp) / f"{name}.safetensors"
            subprocess.run([moex, "experts", "make-problem", "--shape", "qwen3-30b-a3b", "--divide", "64", "--tokens", "2",
                            "--scale-e", "4",
                            "--seed", "1", "--out", str(out)] + extra, check=True, stdout=subprocess.DEVNULL)
            data = out.read_bytes()
            put("problem_file", name, data)
            put("safetensors", "problem_" + name, data)
        put("problem_file", "bad_truncated", data[: len(data) // 2])


def config_seeds():
    sep = "\x01GEN\x01"
    for d in [ROOT / "models" / "moex-tiny-moe", *sorted((ROOT / "tests" / "data" / "models").iterdir())]:
        text = (d / "config.json").read_text()
        gen = d / "generation_config.json"
        put("config", d.name, text + (sep + gen.read_text() if gen.exists() else ""))
    tiny = json.loads((ROOT / "models" / "moex-tiny-moe" / "config.json").read_text())
    put("config", "composite", json.dumps({"model_type": "tiny_vlm", "text_config": tiny, "vision_config": {}}))
    put("config", "rope_yarn", json.dumps({**tiny, "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                                                     "original_max_position_embeddings": 128}}))
    put("config", "fp8", json.dumps({**tiny, "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128],
                                                                      "activation_scheme": "dynamic"}}))
    put("config", "bad_layers", json.dumps({**tiny, "num_hidden_layers": 2**31 - 1,
                                            "mlp_only_layers": list(range(2**31 - 40, 2**31 - 1))}))
    put("config", "bad_deep", '{"model_type": "qwen3_moe", "hidden_size": ' + "[" * 100 + "]" * 100 + "}")
    put("config", "bad_duplicate", '{"model_type": "qwen3_moe", "model_type": "mixtral"}')
    put("config", "bad_gen_types", json.dumps(tiny) + sep + '{"temperature": "hot", "top_p": 2, "eos_token_id": [1e30]}')


def index_seeds():
    weight_map = {"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
                  "c": "model-00002-of-00002.safetensors"}
    put("shard_index", "two_shards", json.dumps({"metadata": {"total_size": 12}, "weight_map": weight_map}, indent=2))
    put("shard_index", "bad_missing_tensor", json.dumps({"weight_map": {**weight_map, "d": "model-00002-of-00002.safetensors"}}))
    put("shard_index", "bad_wrong_shard", json.dumps({"weight_map": {**weight_map, "c": "model-00001-of-00002.safetensors"}}))
    put("shard_index", "bad_unlisted", json.dumps({"weight_map": {"a": "model-00001-of-00002.safetensors"}}))
    put("shard_index", "bad_escape", json.dumps({"weight_map": {"a": "../model-00001-of-00002.safetensors",
                                                                "b": "/etc/passwd", "c": "sub/../../x"}}))
    put("shard_index", "bad_duplicate", '{"weight_map": {"a": "model-00001-of-00002.safetensors", '
                                        '"a": "model-00002-of-00002.safetensors"}}')


def tokenizer_seeds():
    sep = "\x01TEXT\x01"
    # The parity fixtures' tokenizers (real ones, cut to a few hundred tokens); the shipped model's 110 KB file would
    # take 160 ms an input under the sanitizers.
    for path in sorted((ROOT / "tests" / "data" / "tokenizer").glob("*.json")):
        if path.name == "expected.json":
            continue
        name = path.stem
        put("tokenizer", name, path.read_text() + sep + "In the beginning, God créa <|endoftext|> 42\t\u4e2d\U0001f600")
    for name in ["qwen2", "mixtral", "olmoe"]:  # cut to 120 tokens: small seeds keep the fuzzer fast
        j = json.loads((ROOT / "tests" / "data" / "tokenizer" / f"{name}.json").read_text())
        m = j["model"]
        m["vocab"] = {t: i for t, i in m["vocab"].items() if i < 120}
        split = (lambda x: x.split(" ", 1)) if m["merges"] and isinstance(m["merges"][0], str) else (lambda x: x)
        m["merges"] = [x for x in m["merges"] if all(p in m["vocab"] for p in split(x)) and "".join(split(x)) in m["vocab"]]
        j["added_tokens"] = [dict(t, id=120 + k) for k, t in enumerate(j.get("added_tokens", []))]
        put("tokenizer", "small_" + name, json.dumps(j) + sep + "Hello wörld, 12 <|endoftext|>")
    put("tokenizer", "bad_deep", '{"normalizer": ' + '{"type": "Sequence", "normalizers": [' * 20 + "]}" * 20 + "}")


def main():
    safetensors_seeds()
    problem_seeds(sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "build" / "moex"))
    config_seeds()
    index_seeds()
    tokenizer_seeds()


if __name__ == "__main__":
    main()
