#!/usr/bin/env python3
"""model_info: `pllm info` describes every random-weight test model (label unit, seconds).

Every output of tests/gen_hf_models.py (Hugging Face directories in F32/F16/BF16, single and
sharded; GGUF files in F32/F16/BF16 and K-quant mixes; llama, llama with linear and Llama-3 rope
scaling, mistral with an explicit head_dim, qwen2 with Q/K/V biases) goes through
`pllm info --json` and `pllm info`; the description must match what the generator wrote, taken
independently: the spec (shapes, tying, biases, norm eps, rope theta and scaling, Llama-3
frequency factors by the reference formula of tests/pyref/ref_forward_hf.py), config.json and
generation_config.json (generation defaults), the files written (shards), and for GGUF files
the gguf package's reading of the file (general.architecture, every 2-D tensor's type, tensor
bytes). A GGUF with llama.cpp's general.sampling.* keys gives those generation defaults; an
out-of-range one is refused naming the file, key and value. The parameter count equals the generator's weights' element count; identities are
distinct. The human-readable form shows every section. The two real models are described by
cli_tools (default) and model_qwen2_real (second).
"""
import collections
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "pyref"))
import gen_hf_models as G  # noqa: E402
from ref_forward_hf import llama3_factors  # noqa: E402

PLLM = os.environ.get("PLLM_BIN", "pllm")
LABELS = ("model:", "path:", "architecture:", "parameters:", "weights:", "shape:", "context:", "vocabulary:", "rope:",
          "matrix dtypes:", "embeddings:", "tokenizer:", "chat template:", "generation defaults:", "identity:")
failures = []
n_checks = 0


def check(cond, what):
    global n_checks
    n_checks += 1
    if not cond:
        failures.append(what)
        print("FAIL: " + what, flush=True)


def close(a, b, rel=1e-6):
    return a is not None and abs(a - b) <= rel * max(abs(b), 1e-30)


def expected_gen(spec, kind):
    """generation_defaults as written: generation_config.json, else config.json's bos/eos (HF);
    nothing for the test GGUF files (their EOS would be tokenizer metadata; no sampling keys)."""
    if kind != "hf":
        return {}
    s = G.SPECS[spec]
    g = dict(s["gen"]) if s.get("gen") else {k: v for k, v in (("bos_token_id", s.get("bos")), ("eos_token_id", s.get("eos")))
                                              if v is not None}
    if "eos_token_id" in g and not isinstance(g["eos_token_id"], list):
        g["eos_token_id"] = [g["eos_token_id"]]
    return g


def main():
    tmp = tempfile.mkdtemp(prefix="model_info_", dir=os.environ.get("PLLM_TEST_TMP"))
    manifest = G.generate(tmp)
    idents = {}
    for e in manifest:
        spec, kind, path = e["spec"], e["kind"], e["path"]
        s = G.SPECS[spec]
        name = os.path.basename(path)
        p = subprocess.run([PLLM, "info", "--json", path], capture_output=True, text=True)
        check(p.returncode == 0, f"{name}: pllm info --json exits 0: {p.returncode} {p.stderr[-300:]}")
        if p.returncode != 0:
            continue
        info = json.loads(p.stdout)
        m = info["model"]
        hd = G.head_dim(s)
        want = dict(format=kind, n_vocab=s["V"], n_embd=s["E"], n_layer=s["L"], n_head=s["H"], n_head_kv=s["HKV"], head_dim=hd,
                    n_ff=s["F"], tied_embeddings=s["tied"], qkv_bias=bool(s.get("bias")), qk_norm=bool(s.get("qk_norm")), n_ctx_train=512)
        bad = {k: (m.get(k), v) for k, v in want.items() if m.get(k) != v}
        check(not bad, f"{name}: shapes and flags (got, want): {bad}")
        check(close(m.get("norm_eps"), s["eps"], 1e-6) and close(m["rope"].get("theta"), s["theta"], 1e-6),
              f"{name}: norm eps {m.get('norm_eps')} / rope theta {m['rope'].get('theta')}")
        # rotation pairing: HF checkpoints rotate halves; GGUF llama/mistral adjacent pairs, qwen2 halves
        mode = "neox" if kind == "hf" or s["arch"] in ("qwen2", "qwen2moe", "qwen3", "qwen3moe", "phi3", "gemma3") else "norm"
        check(m["rope"].get("mode") == mode and m["rope"].get("dim") == G.rope_dim(s),
              f"{name}: rope mode {m['rope']} (want {mode}, dim {G.rope_dim(s)})")
        rs = s.get("rope_scaling") or {}
        rtype = rs.get("rope_type") or rs.get("type") or "none"
        check(m["rope"].get("scaling") == rtype, f"{name}: rope scaling {m['rope'].get('scaling')} (want {rtype})")
        if rtype == "linear":
            check(close(m["rope"].get("factor"), rs["factor"]), f"{name}: linear factor {m['rope']}")
        if rtype == "longrope":
            got_s, got_l = m["rope"].get("freq_factors"), m["rope"].get("long_factors")
            check(got_s == rs["short_factor"] and got_l == rs["long_factor"]
                  and close(m["rope"].get("attn_factor"), G.longrope_attn_factor(s))
                  and m["rope"].get("original_max_position_embeddings") == s["original_max_position_embeddings"],
                  f"{name}: LongRoPE factors / attention factor / original context {m['rope']}")
        if rtype == "llama3":
            ref = llama3_factors(s["theta"], hd, rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"],
                                 rs["original_max_position_embeddings"])
            got = np.array(m["rope"].get("freq_factors") or [np.nan])
            check(got.shape == ref.shape and np.allclose(got, ref, rtol=1e-6),
                  f"{name}: Llama-3 frequency factors {got} vs the reference {ref}")
        # parameters: the generator's weights, element for element
        n_params = sum(x.size for x in G.make_weights(spec, seed=0).values())
        check(info.get("parameters") == n_params, f"{name}: parameters {info.get('parameters')} (want {n_params})")
        n_mat = 7 * s["L"] + (1 if s["tied"] else 2)
        moe_layers = [l for l in range(s["L"]) if s.get("experts") and l not in s["mlp_only"]]
        n_mat += len(moe_layers) * (3 * s.get("experts", 0) + 1 - 3 + (3 if s.get("F_shexp") else 0))  # router,
        # experts (and the shared expert) for gate/up/down
        if s.get("experts"):  # experts: count, top-k, ff, normalization, the layers with them
            ex = m.get("experts") or {}
            want = dict(count=s["experts"], used=s["top_k"], ff_length=s["F_exp"], norm_topk_prob=s["norm_topk"],
                        gating="softmax", shared_experts=1 if s.get("F_shexp") else 0, layers=moe_layers,
                        layout="fused" if e.get("fused") else "per-expert" if kind == "hf" or e.get("per_expert") else "stacked")
            if s.get("F_shexp"):
                want["shared_ff_length"] = s["F_shexp"]
            check(ex == want, f"{name}: experts {ex} (want {want})")
            if e.get("fused") or e.get("per_expert"):  # the text form names the layout read
                pt = subprocess.run([PLLM, "info", path], capture_output=True, text=True)
                check(pt.returncode == 0 and f"expert tensors {want['layout']}\n" in pt.stdout,
                      f"{name}: pllm info text does not say 'expert tensors {want['layout']}': {[l for l in pt.stdout.splitlines() if l.startswith('experts:')]}")
            w0 = G.make_weights(spec, seed=0)
            inactive = sum(x.size for n, x in w0.items() if ".experts." in n and int(n.split(".experts.")[1].split(".")[0])
                           >= s["top_k"])
            check(info.get("active_parameters") == sum(x.size for x in w0.values()) - inactive,
                  f"{name}: active parameters {info.get('active_parameters')}")
        else:
            check("experts" not in m and "active_parameters" not in info, f"{name}: no experts described")
        if kind == "hf":
            dt = e["dtype"]
            size = {"F32": 4, "F16": 2, "BF16": 2}[dt]
            check(m.get("matrix_dtypes") == {dt: n_mat}, f"{name}: matrix dtypes {m.get('matrix_dtypes')} (want {dt} x{n_mat})")
            check(m.get("weight_bytes") == n_params * size, f"{name}: weight bytes {m.get('weight_bytes')} (want {n_params * size})")
            files = sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".safetensors"))
            check(sorted(m.get("files", [])) == files and len(files) == e["shards"], f"{name}: files {m.get('files')} (want {files})")
            want_src = {"gemma3": "gemma3_text", "qwen3moe": "qwen3_moe", "qwen2moe": "qwen2_moe"}.get(s["arch"], s["arch"])
            check(m.get("source_arch") == want_src, f"{name}: source arch {m.get('source_arch')} (want {want_src})")
        else:
            import gguf
            r = gguf.GGUFReader(path)
            # fused phi3 tensors are 3 (attn_qkv) and 2 (ffn_up) of the matrices computed with
            fused = {"attn_qkv": 3, "ffn_up": 2} if s["arch"] == "phi3" else {}
            types = collections.Counter()
            for t_ in r.tensors:
                if len(t_.shape) > 2:  # stacked experts: one matrix per expert
                    types[t_.tensor_type.name] += int(t_.shape[2])
                elif len(t_.shape) > 1:
                    types[t_.tensor_type.name] += fused.get(t_.name.split(".")[-2], 1)
            check(m.get("matrix_dtypes") == dict(types) and sum(types.values()) == n_mat,
                  f"{name}: matrix dtypes {m.get('matrix_dtypes')} (the file: {dict(types)}, {n_mat} matrices)")
            nbytes = sum(int(t.n_bytes) for t in r.tensors)
            check(m.get("weight_bytes") == nbytes, f"{name}: weight bytes {m.get('weight_bytes')} (the file's tensors: {nbytes})")
            f = r.fields["general.architecture"]
            arch = bytes(f.parts[f.data[0]]).decode()
            check(m.get("source_arch") == arch and m.get("files") == [path], f"{name}: source arch {m.get('source_arch')} "
                  f"(the file: {arch}), files {m.get('files')}")
        graph = {"qwen3moe": "qwen3", "qwen2moe": "qwen2"}.get(s["arch"], s["arch"] if s["arch"] in ("qwen2", "qwen3", "gemma3")
                                                              else "llama")
        check(m.get("arch") == graph, f"{name}: graph {m.get('arch')}")
        if s.get("experts"):
            check("experts:" in subprocess.run([PLLM, "info", path], capture_output=True, text=True).stdout,
                  f"{name}: the human-readable form has an experts line")
        if s["arch"] == "gemma3":  # layer types, window, scales, local rope base
            lt = ["sliding" if t == "sliding_attention" else "global" for t in s["layer_types"]]
            got = (m.get("layer_types"), m.get("sliding_window"), m.get("ffn_act"), m.get("post_norms"),
                   m.get("rope", {}).get("theta_local"))
            want = (lt, s["sliding_window"], "gelu_tanh", True, s["rope_local_base_freq"])
            check(got == want and close(m.get("attn_scale", 0), s["query_pre_attn_scalar"] ** -0.5, 1e-6)
                  and close(m.get("embd_scale", 0), s["E"] ** 0.5, 1e-2), f"{name}: gemma3 fields {got} (want {want}), "
                  f"attn_scale {m.get('attn_scale')}, embd_scale {m.get('embd_scale')}")
        gd, wg = m.get("generation_defaults", {}), expected_gen(spec, kind)
        same = set(gd) == set(wg) and all(close(gd[k], v, 1e-6) if isinstance(v, float) else gd[k] == v for k, v in wg.items())
        check(same, f"{name}: generation defaults {gd} (want {wg})")
        tk = info.get("tokenizer", {})
        check(tk.get("loaded") is False and name in tk.get("error", ""), f"{name}: no tokenizer, said with the file's name: {tk}")
        check(m.get("identity") not in idents, f"{name}: identity {m.get('identity')} also {idents.get(m.get('identity'))}")
        idents[m.get("identity")] = name
        p = subprocess.run([PLLM, "info", path], capture_output=True, text=True)
        missing = [l for l in LABELS if l not in p.stdout]
        check(p.returncode == 0 and not missing, f"{name}: the human-readable form lacks {missing}")
        check(("QK norm yes" in p.stdout) == bool(s.get("qk_norm")), f"{name}: the human-readable form says whether q/k are normed")
        if rtype != "none":
            check(f"scaling {rtype}" in p.stdout, f"{name}: the rope line names the scaling")
        if wg:
            check("temperature" not in wg or f"temperature {wg['temperature']:g}" in p.stdout,
                  f"{name}: human-readable generation defaults: {p.stdout[-300:]}")
        print(f"{name}: {m['arch']} ({m['source_arch']}), {m['matrix_dtypes']}, rope {m['rope']['mode']}/{m['rope']['scaling']}, "
              f"{info['parameters']} parameters, generation defaults {gd or 'none'}")
    # GGUF generation defaults: llama.cpp's general.sampling.* keys
    keys = {"general.sampling.temp": 0.8, "general.sampling.top_k": 40, "general.sampling.top_p": 0.95,
            "general.sampling.min_p": 0.05, "general.sampling.penalty_repeat": 1.1}
    names = {"general.sampling.temp": "temperature", "general.sampling.top_k": "top_k", "general.sampling.top_p": "top_p",
             "general.sampling.min_p": "min_p", "general.sampling.penalty_repeat": "repetition_penalty"}
    w = G.make_weights("llama-mha", seed=1)
    path = G.write_gguf(os.path.join(tmp, "sampling.gguf"), "llama-mha", w, "F32", extra_kv=keys)
    p = subprocess.run([PLLM, "info", "--json", path], capture_output=True, text=True)
    gd = json.loads(p.stdout)["model"].get("generation_defaults", {}) if p.returncode == 0 else {}
    want = {names[k]: v for k, v in keys.items()}
    check(set(gd) == set(want) and all(close(gd[k], v, 1e-6) for k, v in want.items()),
          f"general.sampling.* keys: generation defaults {gd} (want {want}) {p.stderr[-300:]}")
    print(f"sampling.gguf: generation defaults {gd}")
    path = G.write_gguf(os.path.join(tmp, "bad-sampling.gguf"), "llama-mha", w, "F32", extra_kv={"general.sampling.top_p": 1.5})
    p = subprocess.run([PLLM, "info", path], capture_output=True, text=True)
    check(p.returncode == 3 and "general.sampling.top_p" in p.stderr and "bad-sampling.gguf" in p.stderr and "1.5" in p.stderr,
          f"an out-of-range general.sampling.top_p is refused naming the file, key and value: {p.returncode} {p.stderr[-300:]}")
    import shutil
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"model_info: {len(manifest)} models, {n_checks} checks, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
