"""Models outside the suite, from the libraries people compile: torchvision, transformers.

The suite (``models.py``) is what we tuned for; these are models nobody tuned for. Each is
built from its library's own code with random weights (no downloads), and measured like a
suite row: eager, minipt2 and torch.compile side by side, warm ``do_bench`` medians in
rounds, first-call seconds, the first step's relative error against eager, and how many
frames minipt2 ran eagerly (a ``FallbackWarning``) or split (graph count).

    python benchmarks/outside.py                      # every model whose library is present
    python benchmarks/outside.py --models resnet50,bert --kinds train --dtype float32

Each model runs in a process of its own (``--one NAME``), under a time limit, so that one
model's crash or hang is a row, not the end of the run. Needs a CUDA device; on the CPU it
runs the small sizes (``--size cpu``), for trying the script out. ``--jobs 8`` runs eight
children at once: a sweep for errors, fallbacks and graph counts, not for times.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import time
import warnings

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


# ---------------------------------------------------------------------------- the models
# name -> (library, build(size) -> (module, example inputs, loss of the module's output))

def _tv(name: str, batch: int, res: int):
    def build(size: str):
        import torchvision

        b, r = (batch, res) if size == "full" else (2, 64)
        model = getattr(torchvision.models, name)(weights=None)
        x = torch.randn(b, 3, r, r)
        y = torch.randint(1000, (b,))
        return model, (x,), lambda out: torch.nn.functional.cross_entropy(out.float(),
                                                                           y.to(out.device))
    return "torchvision", build


def _hf(config_name: str, model_name: str, full: dict, batch: int, seq: int,
        seq2seq=False, small: dict | None = None):
    """``small``: what the model's config needs besides the shared small sizes (names of its
    own, or sizes that must agree with them)."""
    def build(size: str):
        import transformers

        kwargs = dict(full)
        b, s = batch, seq
        if size != "full":
            kwargs.update(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=4, intermediate_size=128, vocab_size=256,
                          d_model=64, num_layers=2, num_heads=4, d_ff=128,  # (T5's names)
                          encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                          decoder_attention_heads=4, encoder_ffn_dim=128,
                          decoder_ffn_dim=128)  # (BART's)
            kwargs.update(small or {})
            b, s = 2, 16
        config = getattr(transformers, config_name)(**kwargs)
        config.use_cache = False  # one forward (training or scoring), not generation
        for key in ("hidden_dropout_prob", "attention_probs_dropout_prob", "resid_pdrop",
                    "embd_pdrop", "attn_pdrop", "dropout_rate", "attention_dropout",
                    "dropout", "activation_dropout"):
            if hasattr(config, key):
                setattr(config, key, 0.0)
        model = getattr(transformers, model_name)(config)
        ids = torch.randint(config.vocab_size, (b, s))
        if seq2seq:
            args = (ids, None, ids)  # input_ids, attention_mask, decoder_input_ids
        else:
            args = (ids,)
        return model, args, _hf_loss
    return "transformers", build


def _hf_loss(out):
    logits = out.logits if hasattr(out, "logits") else out[0]
    return logits.float().square().mean()


# a decoder of about 130M parameters: the libraries' default configs are 1-20B
SMALL_LM = dict(hidden_size=1024, num_hidden_layers=8, num_attention_heads=16,
                num_key_value_heads=4, intermediate_size=2816, vocab_size=32000)

MODELS = {
    "resnet50": _tv("resnet50", 64, 224),
    "mobilenet_v3_large": _tv("mobilenet_v3_large", 64, 224),
    "vit_b_16": _tv("vit_b_16", 32, 224),
    "convnext_tiny": _tv("convnext_tiny", 32, 224),
    "bert": _hf("BertConfig", "BertForMaskedLM", {}, 8, 512),
    "gpt2": _hf("GPT2Config", "GPT2LMHeadModel", {}, 8, 512),
    "llama": _hf("LlamaConfig", "LlamaForCausalLM", SMALL_LM, 8, 512),
    "mistral": _hf("MistralConfig", "MistralForCausalLM",  # grouped-query attention
                   dict(SMALL_LM, sliding_window=None), 8, 512),
    # the wider sweep: more architectures, for correctness and fallbacks first
    "efficientnet_b0": _tv("efficientnet_b0", 64, 224),
    "densenet121": _tv("densenet121", 32, 224),
    "swin_t": _tv("swin_t", 32, 224),
    "regnet_y_400mf": _tv("regnet_y_400mf", 64, 224),
    "shufflenet_v2_x1_0": _tv("shufflenet_v2_x1_0", 64, 224),
    "squeezenet1_0": _tv("squeezenet1_0", 64, 224),
    "vgg11_bn": _tv("vgg11_bn", 32, 224),
    "resnext50_32x4d": _tv("resnext50_32x4d", 32, 224),
    "maxvit_t": _tv("maxvit_t", 16, 224),
    # positions start after the padding index, as in roberta-base: 512 tokens need 514
    "roberta": _hf("RobertaConfig", "RobertaForMaskedLM", dict(max_position_embeddings=514),
                   8, 512),
    "electra": _hf("ElectraConfig", "ElectraForMaskedLM", {}, 8, 512),
    "albert": _hf("AlbertConfig", "AlbertForMaskedLM",
                  dict(hidden_size=768, num_attention_heads=12, intermediate_size=3072), 8, 512),
    "opt": _hf("OPTConfig", "OPTForCausalLM", {}, 8, 512),
    "qwen2": _hf("Qwen2Config", "Qwen2ForCausalLM", SMALL_LM, 8, 512),
    "gemma": _hf("GemmaConfig", "GemmaForCausalLM", dict(SMALL_LM, head_dim=64), 8, 512),
    "phi": _hf("PhiConfig", "PhiForCausalLM", dict(SMALL_LM, intermediate_size=4096), 8, 512),
    "gpt_neox": _hf("GPTNeoXConfig", "GPTNeoXForCausalLM",
                    dict(SMALL_LM, intermediate_size=4096), 8, 512),
    "falcon": _hf("FalconConfig", "FalconForCausalLM", SMALL_LM, 8, 512),
    "deberta_v2": _hf("DebertaV2Config", "DebertaV2ForMaskedLM", {}, 8, 512),
    "bart": _hf("BartConfig", "BartForConditionalGeneration", {}, 8, 256, seq2seq=True),
    "t5": _hf("T5Config", "T5ForConditionalGeneration",
              dict(d_model=512, num_layers=6, num_heads=8, d_ff=2048, vocab_size=32128),
              8, 256, seq2seq=True),
    # a third sweep (book/docs/performance.md, "Twenty-two more, on the CPU")
    **{name: _tv(name, batch, 224) for name, batch in [
        ("resnet18", 64), ("mobilenet_v2", 64), ("mobilenet_v3_small", 64),
        ("regnet_x_400mf", 64), ("efficientnet_v2_s", 32), ("swin_v2_t", 32), ("alexnet", 64),
        ("squeezenet1_1", 64)]},
    "distilbert": _hf("DistilBertConfig", "DistilBertForMaskedLM", {}, 8, 512),
    "mobilebert": _hf("MobileBertConfig", "MobileBertForMaskedLM", {}, 8, 512, small=dict(
        embedding_size=32, intra_bottleneck_size=32, true_hidden_size=32)),
    "squeezebert": _hf("SqueezeBertConfig", "SqueezeBertForMaskedLM", {}, 8, 512,
                       small=dict(embedding_size=64)),
    "convbert": _hf("ConvBertConfig", "ConvBertForMaskedLM", {}, 8, 512),
    "xlnet": _hf("XLNetConfig", "XLNetLMHeadModel", dict(n_layer=8), 8, 512,
                 small=dict(d_head=16, d_inner=128)),
    "gptj": _hf("GPTJConfig", "GPTJForCausalLM", dict(SMALL_LM, rotary_dim=16), 8, 512),
    "gpt_bigcode": _hf("GPTBigCodeConfig", "GPTBigCodeForCausalLM", SMALL_LM, 8, 512),
    "bloom": _hf("BloomConfig", "BloomForCausalLM", SMALL_LM, 8, 512),
    "codegen": _hf("CodeGenConfig", "CodeGenForCausalLM", dict(SMALL_LM, rotary_dim=16), 8,
                   512),
    "mbart": _hf("MBartConfig", "MBartForConditionalGeneration", {}, 8, 256, seq2seq=True),
    "pegasus": _hf("PegasusConfig", "PegasusForConditionalGeneration", {}, 8, 256,
                   seq2seq=True),
    "blenderbot_small": _hf("BlenderbotSmallConfig", "BlenderbotSmallForConditionalGeneration",
                            {}, 8, 256, seq2seq=True),
    "stablelm": _hf("StableLmConfig", "StableLmForCausalLM", SMALL_LM, 8, 512),
    "mixtral": _hf("MixtralConfig", "MixtralForCausalLM", dict(SMALL_LM, num_local_experts=4),
                   8, 512),
}


# ---------------------------------------------------------------------------- one model

def measure(name: str, kind: str, dtype: torch.dtype, device: str, size: str,
            peer: bool, mode: str = "default") -> dict:
    from common import first_call, rel_error, time_rounds
    from dynamo.exc import FallbackWarning

    import driver

    _, build = MODELS[name]
    torch.manual_seed(0)
    module, args, loss_of = build(size)
    module = module.to(device=device, dtype=dtype)
    args = tuple((a.to(device, dtype) if a.is_floating_point() else a.to(device))
                 if isinstance(a, torch.Tensor) else a for a in args)
    state = {k: v.clone() for k, v in module.state_dict().items()}

    def fresh():
        import copy

        m = copy.deepcopy(module)
        m.load_state_dict(state)
        return m.train() if kind == "train" else m.eval()

    def step_of(model, params):
        if kind == "train":
            opt = torch.optim.SGD(params, lr=1e-5)

            def train_step():
                opt.zero_grad(set_to_none=True)
                loss = loss_of(model(*args))
                loss.backward()
                opt.step()
                return loss.detach()
            return train_step

        def infer_step():
            with torch.no_grad():
                out = model(*args)
            return out.logits if hasattr(out, "logits") else out
        return infer_step

    row = {"model": name, "kind": kind, "dtype": str(dtype).replace("torch.", "")}
    if mode != "default":
        row["mode"] = mode
    eager_model = fresh()
    fns = {"eager": step_of(eager_model, eager_model.parameters())}
    want = fns["eager"]()
    ours_model = fresh()
    driver.reset()
    compiled = driver.compile(ours_model, mode=mode)
    fns["minipt2"] = step_of(compiled, ours_model.parameters())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", FallbackWarning)
        out, row["minipt2_compile_s"] = first_call(fns["minipt2"], ())
        fns["minipt2"]()
    fallbacks = [str(w.message) for w in caught
                 if issubclass(w.category, FallbackWarning)]
    row["minipt2_fallbacks"] = fallbacks
    row["minipt2_error"] = rel_error(out, want)
    row["minipt2_graphs"] = len(compiled.graphs)
    if peer:
        torch.compiler.reset()
        peer_model = fresh()
        fns["torch_compile"] = step_of(torch.compile(peer_model, mode=mode),
                                       peer_model.parameters())
        try:
            out, row["torch_compile_s"] = first_call(fns["torch_compile"], ())
            row["torch_compile_error"] = rel_error(out, want)
        except Exception as e:  # noqa: BLE001 - the peer's failure is a result
            row["torch_compile_failed"] = f"{type(e).__name__}: {str(e).splitlines()[0]}"
            del fns["torch_compile"]
    row.update({f"{who}_ms": ms for who, ms in time_rounds(fns, device).items()})
    for who in ("minipt2", "torch_compile"):
        if f"{who}_ms" in row:
            row[f"{who}_speedup"] = row["eager_ms"] / row[f"{who}_ms"]
    return row


# ---------------------------------------------------------------------------- the run

def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="all")
    p.add_argument("--kinds", default="train,infer")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--size", default=None, help="full (GPU) or cpu; default by device")
    p.add_argument("--no-torch-compile", action="store_true")
    p.add_argument("--timeout", type=int, default=240, help="seconds per model and kind")
    p.add_argument("--out", default=None, help="write the rows as JSON here")
    p.add_argument("--jobs", type=int, default=1,
                   help="children at once (>1: a sweep; the times are then not comparable)")
    p.add_argument("--mode", default="default", help="both compilers' mode (max-autotune, ...)")
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)  # NAME:KIND, in a child
    a = p.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    size = a.size or ("full" if device == "cuda" else "cpu")
    dtype = getattr(torch, a.dtype)
    if a.one:
        name, kind = a.one.split(":")
        row = measure(name, kind, dtype, device, size, not a.no_torch_compile, a.mode)
        print("ROW " + json.dumps(row), flush=True)
        return
    names = list(MODELS) if a.models == "all" else a.models.split(",")
    jobs = []
    for name in names:
        library = MODELS[name][0]
        try:
            __import__(library)
        except ImportError:
            print(f"{name}: skipped ({library} is not installed)")
            continue
        jobs += [(name, kind) for kind in a.kinds.split(",")]
    # --jobs > 1 runs children side by side: a sweep for errors, fallbacks and graph counts,
    # whose times are not comparable (the rows share the GPU and the host)
    with concurrent.futures.ThreadPoolExecutor(max(1, a.jobs)) as pool:
        futures = [pool.submit(run_child, name, kind, a, size) for name, kind in jobs]
        rows = []
        for future in concurrent.futures.as_completed(futures):
            rows.append(future.result())
            print(line_of(rows[-1]), flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)


def run_child(name: str, kind: str, a: argparse.Namespace, size: str) -> dict:
    """One model and kind in a process of its own, under ``--timeout``: its row."""
    cmd = [sys.executable, __file__, "--one", f"{name}:{kind}", "--dtype", a.dtype,
           "--size", size, "--mode", a.mode] + (["--no-torch-compile"] if a.no_torch_compile
                                                else [])
    start = time.perf_counter()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
        found = [line[4:] for line in done.stdout.splitlines() if line.startswith("ROW ")]
        lines = done.stderr.strip().splitlines() or ["?"]
        row = json.loads(found[0]) if found else {
            "model": name, "kind": kind, "failed": lines[-1][:300],
            "stderr_tail": lines[-60:]}  # the traceback, for the JSON
    except subprocess.TimeoutExpired:
        row = {"model": name, "kind": kind, "failed": f"timeout {a.timeout}s"}
    row["wall_s"] = round(time.perf_counter() - start, 1)
    return row


def line_of(r: dict) -> str:
    if "failed" in r:
        return f"{r['model']:20s} {r['kind']:5s} FAILED {r['failed']}"
    tc = (f"{r['torch_compile_speedup']:.2f}x ({r['torch_compile_s']:.1f}s)"
          if "torch_compile_speedup" in r else r.get("torch_compile_failed", "-"))
    return (f"{r['model']:20s} {r['kind']:5s} eager {r['eager_ms']:8.2f} ms  minipt2 "
            f"{r['minipt2_speedup']:.2f}x ({r['minipt2_compile_s']:.1f}s, "
            f"{r['minipt2_graphs']} graphs, err {r['minipt2_error']:.1e}, "
            f"{len(r['minipt2_fallbacks'])} fallbacks)  torch.compile {tc}  "
            f"[{r['wall_s']}s]" + "".join(f"\n    {m}" for m in r["minipt2_fallbacks"]))


if __name__ == "__main__":
    main()
