# Makes the tokenizer fixtures under tests/data/tokenizer/: four small tokenizers trained here with the Hugging Face
# `tokenizers` package (the forms the supported checkpoints ship), and expected.json with what `tokenizers` returns
# for the test strings, which tests/test_tokenizer.cpp must reproduce exactly.
"""Usage: python3 tests/data/make_tokenizer_fixtures.py [--out tests/data/tokenizer]

Needs: tokenizers (PyPI) and the Debian package bible-kjv (the `bible` command; apt-get install -y bible-kjv) for the
training text: the first books of the King James Bible (public domain) plus a few multilingual lines written here.
Deterministic: training on one thread, so running it again rewrites identical files.

The tokenizers (all BPE):
  qwen2          NFC normalizer; Sequence[Split(Qwen2 regex, Isolated), ByteLevel(use_regex=False)]; ByteLevel
                 decoder and post-processor; special tokens appended after the vocabulary (<|endoftext|>,
                 <|im_start|>, <|im_end|>) and one normalized non-special token ("café"); merges spelled "a b"
  mixtral        trained without CJK and emoji lines; byte_fallback with <0x00>..<0xFF> at ids 3..258, unk <unk>, fuse_unk; normalizer
                 Sequence[Prepend("▁"), Replace(" ", "▁")], no pre-tokenizer; decoder Sequence[Replace("▁", " "),
                 ByteFallback, Fuse, Strip(" ", 1, 0)]; TemplateProcessing adding <s>; merges spelled ["a", "b"]
  olmoe          ByteLevel pre-tokenizer with its own (GPT-2) regex; added tokens with lstrip/rstrip, single_word and
                 a normalized non-special "    " (four spaces)
  variant_*      the olmoe and metaspace_unk models with other components (see make_variant_bytelevel and
                 make_variant_metaspace), for behaviors the four above do not reach
  metaspace_unk  Metaspace pre-tokenizer (prepend_scheme "first") and decoder, trained on lower-case letters only
                 so that other characters become <unk> (fuse_unk off), ignore_merges on

expected.json: {"strings": [...], "tokenizers": {name: {"cases": [{"ids", "ids_no_special", "decoded",
"decoded_skip"} one per string], "single_id": [decode([i]) for every id] (not for variant_bytelevel), "random": [{"ids", "decoded",
"decoded_skip"}]}}}. "decoded*" decode "ids" (the add_special_tokens=True ids).
"""
import argparse
import json
import os
import random
import re
import subprocess
import unicodedata

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # before tokenizers starts its thread pool
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
               r"|\s+(?!\S)|\s+")

# Written for these fixtures, so that the trained merges cover a few scripts besides English.
EXTRA_LINES = [
    "Le café est chaud et la crème est fraîche; où est le garçon?",
    "Die Straße ist lang, und die Bäume sind grün. Größer, schöner, müde.",
    "El niño comió una manzana roja en la mañana.",
    "今天天气很好，我们去公园散步。中文字符和标点符号。",
    "日本語の文章です。ひらがなとカタカナ、漢字を使います。",
    "Привет, мир! Это короткое предложение.",
    "Γειά σου κόσμε, αυτό είναι ελληνικά.",
    "Emoji: 🍕 🎉 👍 ❤️ 😀 and more 🍕🍕 text.",
    "def add(x, y):\n    return x + y  # adds two numbers\n",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 100 2024 3.14159 1,000,000.",
]

STRINGS = [
    "",
    " ",
    "Hello world",
    "Hello, world! How are you?",
    "In the beginning God created the heaven and the earth.",
    "  leading spaces",
    "trailing spaces   ",
    "multiple   spaces    between words",
    "line one\nline two\n\nline four\n",
    "\r\n windows \r\n newlines\r\n",
    "tabs\tand\t\tmore\ttabs \t mixed",
    "digits 1234567890 and 3.14159 and 000",
    "year 2024, phone 555-0199, total: $1,234.56",
    "punctuation!!! ??? ... --- ;;; (parens) [brackets] {braces} <angle>",
    "it's don't we're they've I'm you'll he'd IT'S DON'T We'Re",
    "café naïve résumé Ångström",
    unicodedata.normalize("NFD", "café naïve résumé Ångström"),
    "ligature ﬁ and ① and Ω ohm and K kelvin",
    "中文字符测试，日本語のテキスト。한국어 텍스트",
    "abc中文123def",
    "I love 🍕 and 🎉!",
    "family 👨‍👩‍👧‍👦, flag 🇫🇷, thumbs 👍🏽, heart ❤️",
    "rare: 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ʬ ꙮ \u0001\u0007 control \u007f del",
    "nbsp\u00a0here, nel\u0085there, ls\u2028ps\u2029, ideographic\u3000space",
    "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
    "<s>Hello</s> world<s>",
    "<|endoftext|>text<|endoftext|><|endoftext|>",
    "<|im_start partial <|im_end| <s without close",
    "hello <mask> world and  <mask>  twice",
    "a [WORD] b, a[WORD]b, [WORD]",
    "def f(x):\n    return x * 2  # comment\n        deeper\n",
    "https://example.com/path?query=1&x=y#frag",
    "Mixed CASE camelCaseWords snake_case_words",
    "▁ already ▁▁ metaspace ▁",
    "<0x41> literal byte token text",
    "مرحبا بالعالم שלום नमस्ते",
    "\n",
    "   ",
    "\t\t\n\n  \r\n",
    "supercalifragilisticexpialidocious" * 20,
    "9" * 300,
    "Le café de " + unicodedata.normalize("NFD", "café") + " et CAFÉ",
]


def training_lines():
    out = subprocess.run(["bible", "-f", "Gen1:1-Exo40:38"], check=True, capture_output=True, text=True,
                         stdin=subprocess.DEVNULL).stdout
    lines = [line.split(" ", 1)[1] for line in out.splitlines() if " " in line]
    return lines + EXTRA_LINES * 20


def train(tok, trainer, lines):
    tok.train_from_iterator(lines, trainer)
    return json.loads(tok.to_str())


def make_qwen2(lines):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=800, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(lines, trainer)
    tok.add_special_tokens(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    tok.add_tokens([AddedToken("café", normalized=True, special=False)])
    j = json.loads(tok.to_str())
    j["model"]["merges"] = [f"{a} {b}" for a, b in j["model"]["merges"]]  # the older spelling Qwen2 files use
    return j


def make_mixtral(lines):
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    # Trained with a Metaspace split so that merges stay inside words, as sentencepiece's do; shipped without it.
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never", split=True)
    trainer = trainers.BpeTrainer(vocab_size=700, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False)
    j = train(tok, trainer, [line for line in lines if all(ord(c) < 0x3000 for c in line)])  # CJK, emoji: bytes
    j["pre_tokenizer"] = None
    vocab = j["model"]["vocab"]
    shifted = {}
    for token, i in sorted(vocab.items(), key=lambda kv: kv[1]):
        shifted[token] = i if i < 3 else i + 256
    for b in range(256):
        shifted[f"<0x{b:02X}>"] = 3 + b
    j["model"]["vocab"] = dict(sorted(shifted.items(), key=lambda kv: kv[1]))
    tok = Tokenizer.from_str(json.dumps(j))
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.post_processor = processors.TemplateProcessing(single="<s>:0 $A:0", pair="<s>:0 $A:0 <s>:1 $B:1",
                                                       special_tokens=[("<s>", 1)])
    return json.loads(tok.to_str())


def make_olmoe(lines):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    trainer = trainers.BpeTrainer(vocab_size=900, special_tokens=["<|endoftext|>", "<|padding|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(lines, trainer)
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=True, special=True)])
    tok.add_tokens([AddedToken("[WORD]", single_word=True, normalized=False, special=False),
                    AddedToken("    ", normalized=True, special=False)])
    return json.loads(tok.to_str())


def make_metaspace_unk(lines):
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=False, ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True)
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first", split=True)
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False)
    # Lower-case letters and spaces only: capitals, digits and punctuation become <unk>.
    tok.train_from_iterator([re.sub(r"[^a-z ]", "", line) for line in lines], trainer)
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=False, special=True)])
    tok.add_tokens([AddedToken("[WORD]", single_word=True, normalized=False, special=False)])
    return json.loads(tok.to_str())


def make_variant_bytelevel(lines):
    """olmoe's model with the components real checkpoints use less: NFKC + Lowercase, Digits and Split behaviors
    before ByteLevel(add_prefix_space=True), RobertaProcessing."""
    j = make_olmoe(lines)
    j["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"}]}
    j["pre_tokenizer"] = json.loads(pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.Split("-", behavior="merged_with_previous"),
        pre_tokenizers.Split(Regex(r"[,.]"), behavior="removed"),
        pre_tokenizers.Split(Regex(r"\w+"), behavior="contiguous", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True),
    ]).__getstate__())
    j["post_processor"] = json.loads(processors.RobertaProcessing(("<|padding|>", 1),
                                                                   ("<|endoftext|>", 0)).__getstate__())
    return j


def make_variant_metaspace(lines):
    """metaspace_unk's model with fused <unk>, normalized added tokens (one lstrip+rstrip) under Lowercase +
    Prepend, a Split before Metaspace, decoders Strip and Replace(Regex), and "<s> $A </s>"."""
    j = make_metaspace_unk(lines)
    j["model"]["fuse_unk"] = True
    j["model"]["ignore_merges"] = False
    j["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "Lowercase"}, {"type": "Prepend", "prepend": "x"}]}
    j["pre_tokenizer"] = json.loads(pre_tokenizers.Sequence([
        pre_tokenizers.Split(" ", behavior="merged_with_next"),
        pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True),
    ]).__getstate__())
    j["decoder"] = json.loads(decoders.Sequence([
        decoders.Metaspace(replacement="▁", prepend_scheme="first", split=True),
        decoders.Strip("e", 2, 0),
        decoders.Replace(Regex("[aeiou]+"), "_"),
    ]).__getstate__())
    j["post_processor"] = json.loads(processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", 1), ("</s>", 2)]).__getstate__())
    tok = Tokenizer.from_str(json.dumps(j))
    tok.add_special_tokens([AddedToken("hello", normalized=True, special=True)])
    tok.add_tokens([AddedToken("World", lstrip=True, rstrip=True, normalized=True, special=False)])
    return json.loads(tok.to_str())


def expectations(j, rng, single_ids=True):
    tok = Tokenizer.from_str(json.dumps(j))
    cases = []
    for s in STRINGS:
        ids = tok.encode(s, add_special_tokens=True).ids
        cases.append({
            "ids": ids,
            "ids_no_special": tok.encode(s, add_special_tokens=False).ids,
            "decoded": tok.decode(ids, skip_special_tokens=False),
            "decoded_skip": tok.decode(ids, skip_special_tokens=True),
        })
    size = tok.get_vocab_size(with_added_tokens=True)
    single = [tok.decode([i], skip_special_tokens=False) for i in range(size)] if single_ids else None
    rand = []
    for _ in range(30):
        ids = [rng.randrange(size) for _ in range(rng.randrange(1, 12))]
        rand.append({"ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False),
                     "decoded_skip": tok.decode(ids, skip_special_tokens=True)})
    out = {"vocab_size": size, "cases": cases, "random": rand}
    if single_ids:
        out["single_id"] = single
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "tokenizer"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    lines = training_lines()
    makers = {"qwen2": make_qwen2, "mixtral": make_mixtral, "olmoe": make_olmoe, "metaspace_unk": make_metaspace_unk,
              "variant_bytelevel": make_variant_bytelevel, "variant_metaspace": make_variant_metaspace}
    rng = random.Random(1234)
    expected = {"strings": STRINGS, "tokenizers": {}}
    for name, make in makers.items():
        j = make(lines)
        with open(os.path.join(args.out, f"{name}.json"), "w", encoding="utf-8") as f:
            json.dump(j, f, ensure_ascii=False, separators=(",", ":"))
        # variant_bytelevel decodes each id as olmoe does: no need to list them again.
        expected["tokenizers"][name] = expectations(j, rng, single_ids=name != "variant_bytelevel")
    with open(os.path.join(args.out, "expected.json"), "w", encoding="ascii") as f:
        json.dump(expected, f, ensure_ascii=True, separators=(",", ":"))
    total = sum(os.path.getsize(os.path.join(args.out, n)) for n in os.listdir(args.out))
    print(f"wrote {len(makers)} tokenizers and expected.json to {args.out} ({total} bytes)")


if __name__ == "__main__":
    main()
