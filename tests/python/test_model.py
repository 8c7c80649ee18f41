# The model API through Python: the shipped checkpoint, streaming generation, experts_implementation as a name or a
# map, switching at run time, and clear errors.
import pytest

import moex_experts


def test_generate_streams_and_matches_forward(shipped_model, device):
    m = moex_experts.Model.from_pretrained(shipped_model, device=device, experts_implementation="grouped_mm")
    assert m.config["architecture"] == "qwen3_moe" and m.device == device
    pieces = []
    r = m.generate("And God said,", max_new_tokens=12, stop_on_eos=False,
                   on_token=lambda tok, text: pieces.append((tok, text)))
    assert len(r.new_ids) == 12 and [t for t, _ in pieces] == list(r.new_ids)
    assert "".join(p for _, p in pieces) == r.text and r.text
    assert r.decode_tokens_per_second > 0
    # Greedy decoding is what forward's logits say, token by token.
    m.reset()
    ids = list(r.prompt_ids)
    logits = m.forward(ids)
    assert max(range(len(logits)), key=logits.__getitem__) == r.new_ids[0]
    assert m.decode(list(r.new_ids)) == r.text
    stop = m.generate("And God said,", max_new_tokens=12, stop_on_eos=False, on_token=lambda t, s: False)
    assert len(stop.new_ids) == 1
    # On CUDA the decode step after the first is replayed from a CUDA graph, with the tokens of launched steps.
    assert r.recorded_steps == (11 if device == "cuda" else 0)
    plain = moex_experts.Model.from_pretrained(shipped_model, device=device, experts_implementation="grouped_mm",
                                               decode_graph=False)
    unrecorded = plain.generate("And God said,", max_new_tokens=12, stop_on_eos=False)
    assert unrecorded.recorded_steps == 0 and unrecorded.new_ids == r.new_ids


def test_experts_implementation_by_name_and_map(shipped_model):
    m = moex_experts.Model.from_pretrained(shipped_model)
    assert m.get_experts_implementation() == {"": "grouped_mm"}
    m.set_experts_implementation("eager")
    assert m.experts_backend == "eager"
    m.set_experts_implementation({"": "batched_mm"})
    assert m.get_experts_implementation() == {"": "batched_mm"}
    a = m.generate([1, 2, 3], max_new_tokens=6, stop_on_eos=False).new_ids
    m.set_experts_implementation("grouped_mm")
    assert m.generate([1, 2, 3], max_new_tokens=6, stop_on_eos=False).new_ids == a
    with pytest.raises(ValueError, match="not supported. The only possible arguments are"):
        m.set_experts_implementation("no_such_mm")
    with pytest.raises(ValueError, match="not a sub-config"):
        m.set_experts_implementation({"vision_config": "eager"})


def test_load_errors(tmp_path):
    with pytest.raises(LookupError, match="no such model directory"):
        moex_experts.Model.from_pretrained(str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="unknown device"):
        moex_experts.Model.from_pretrained(str(tmp_path), device="tpu")
