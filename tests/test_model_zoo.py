"""The model zoo: architectures the benchmark suite does not contain, compiled with
``driver.compile`` and checked against eager PyTorch.

This is the project's sweep over common models outside ``benchmarks/models.py``: ViT,
Transformer encoder and decoder, LSTM, GRU, a packed LSTM with weight and spectral norm,
ResNet, MobileNet, a UNet, a recommender, a LLaMA block, Swin-style windows, complex rotary
embeddings, and zoos of norms, pools, activations and losses. Written as a sweep, half of them
found a bug on the CPU or on the H200: a crash (EmbeddingBag, ``torch.sort(x).values``,
LogSigmoid and a CPU scalar on the GPU), a silent or warned eager fallback (complex numbers,
InstanceNorm's running statistics, a loss reading its input's values, a comprehension that
breaks, packing by CPU lengths, spectral norm's ``out=``), or a wrong gradient
(nn.MultiheadAttention in bfloat16 on the GPU, weight norm's backward). Each one trains two
steps (outputs, gradients and BatchNorm's running statistics compared with an identical eager
copy), then runs in eval mode under ``torch.no_grad()``. No frame may fall back to eager (a
``dynamo.FallbackWarning`` fails the test); graph breaks are fine (LSTM and GRU break on
purpose).

The sizes are tiny: this runs on the CPU here. On a GPU the same file runs with
``MINIPT2_TEST_DEVICE=cuda``.
"""

import math
import os
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from dynamo import FallbackWarning

import driver

DEVICE = os.environ.get("MINIPT2_TEST_DEVICE", "cpu")
pytestmark = pytest.mark.skipif(DEVICE == "cuda" and not torch.cuda.is_available(),
                                reason="MINIPT2_TEST_DEVICE=cuda but no CUDA device")

# outputs and buffers; gradients: absolute, times the model's largest gradient (check_grads).
# On CUDA, cuDNN picks convolution algorithms by layout (TF32 included), and a BatchNorm after
# a convolution magnifies those differences: tolerances ten times wider.
RTOL, ATOL, GRAD_TOL = (1e-3, 1e-4, 1e-3) if DEVICE == "cuda" else (1e-4, 1e-5, 1e-4)


# --- the models (float32, tiny) -------------------------------------------------------------

class ViTBlock(nn.Module):
    """Pre-norm block: LayerNorm, nn.MultiheadAttention, GELU MLP."""

    def __init__(self, d=64, h=4):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, h, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        y = self.ln1(x)
        x = x + self.attn(y, y, y, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class ViT(nn.Module):
    """Conv patch embedding, class token, learned positions, two ViT blocks."""

    def __init__(self, d=64):
        super().__init__()
        self.patch = nn.Conv2d(3, d, 4, 4)
        self.cls = nn.Parameter(torch.zeros(1, 1, d))
        self.pos = nn.Parameter(torch.randn(1, 17, d) * 0.02)
        self.blocks = nn.Sequential(ViTBlock(d), ViTBlock(d))
        self.head = nn.Linear(d, 10)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        return self.head(self.blocks(x)[:, 0])


class Encoder(nn.Module):
    """nn.TransformerEncoder (2 layers) over an nn.Embedding."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(100, 64)
        layer = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.out = nn.Linear(64, 100)

    def forward(self, idx):
        return self.out(self.enc(self.emb(idx)))


class LSTMNet(nn.Module):
    """Two-layer nn.LSTM (a graph break around it) between an embedding and a head."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(100, 32)
        self.lstm = nn.LSTM(32, 64, num_layers=2, batch_first=True)
        self.fc = nn.Linear(64, 100)

    def forward(self, idx):
        return self.fc(self.lstm(self.emb(idx))[0])


class GRUNet(nn.Module):
    """nn.GRU (a graph break), last time step into a linear head."""

    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(16, 32, batch_first=True)
        self.fc = nn.Linear(32, 4)

    def forward(self, x):
        return self.fc(self.gru(x)[0][:, -1])


class PackedLSTM(nn.Module):
    """A bidirectional nn.LSTM over a padded batch packed by its lengths (a CPU tensor the
    packing reads: a graph break on each side), weight-normed and spectral-normed heads."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(8, 16, batch_first=True, bidirectional=True)
        self.norm = nn.utils.parametrizations.weight_norm(nn.Linear(32, 16))
        self.head = nn.utils.parametrizations.spectral_norm(nn.Linear(16, 4))

    def forward(self, x, lengths):
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True,
                                                   enforce_sorted=False)
        out, _ = nn.utils.rnn.pad_packed_sequence(self.lstm(packed)[0], batch_first=True)
        return self.head(torch.tanh(self.norm(out.sum(1))))


class BasicBlock(nn.Module):
    """ResNet basic block: conv-BN-ReLU twice, 1x1 conv shortcut when the shape changes."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.sc = nn.Sequential()
        if stride != 1 or cin != cout:
            self.sc = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                    nn.BatchNorm2d(cout))

    def forward(self, x):
        return F.relu(self.b2(self.c2(F.relu(self.b1(self.c1(x))))) + self.sc(x))


class ResNet(nn.Module):
    """BatchNorm (running statistics), in-place ReLU, max pool, adaptive average pool."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16),
                                  nn.ReLU(inplace=True), nn.MaxPool2d(2))
        self.layers = nn.Sequential(BasicBlock(16, 16, 1), BasicBlock(16, 32, 2))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.layers(self.stem(x))), 1))


class MobileBlock(nn.Module):
    """Inverted residual: depthwise conv, Hardswish, ReLU6, squeeze-excite with Hardsigmoid."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(8, 32, 1), nn.BatchNorm2d(32), nn.Hardswish(),
            nn.Conv2d(32, 32, 3, 1, 1, groups=32), nn.BatchNorm2d(32), nn.ReLU6(),
            nn.Conv2d(32, 8, 1), nn.BatchNorm2d(8))
        self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(8, 4, 1), nn.SiLU(),
                                nn.Conv2d(4, 8, 1), nn.Hardsigmoid())

    def forward(self, x):
        y = self.net(x)
        return x + y * self.se(y)


class UNetish(nn.Module):
    """GroupNorm, ConvTranspose2d, InstanceNorm2d, nearest and bilinear F.interpolate."""

    def __init__(self):
        super().__init__()
        self.down = nn.Conv2d(4, 16, 3, 2, 1)
        self.gn = nn.GroupNorm(4, 16)
        self.up = nn.ConvTranspose2d(16, 8, 2, 2)
        self.mix = nn.Conv2d(12, 4, 3, 1, 1)
        self.inorm = nn.InstanceNorm2d(4, affine=True)

    def forward(self, x):
        h = F.silu(self.gn(self.down(x)))
        u = torch.cat([self.up(h), F.interpolate(x, scale_factor=1.0, mode="nearest")], 1)
        skip = F.interpolate(h[:, :4], size=x.shape[-2:], mode="bilinear", align_corners=False)
        return self.inorm(self.mix(u)) + skip


class RecSys(nn.Module):
    """nn.EmbeddingBag with offsets, an embedding and dense features into an MLP."""

    def __init__(self):
        super().__init__()
        self.bag = nn.EmbeddingBag(1000, 16, mode="sum")
        self.emb = nn.Embedding(50, 16)
        self.mlp = nn.Sequential(nn.Linear(32 + 8, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, ids, offsets, cat, dense):
        z = torch.cat([self.bag(ids, offsets), self.emb(cat), dense], 1)
        return torch.sigmoid(self.mlp(z)).squeeze(1)


class Llama(nn.Module):
    """LLaMA block: RMSNorm, rotary embeddings from buffers, causal SDPA, SwiGLU."""

    def __init__(self, d=64, h=4):
        super().__init__()
        self.h = h
        self.wqkv = nn.Linear(d, 3 * d, bias=False)
        self.wo = nn.Linear(d, d, bias=False)
        self.w1 = nn.Linear(d, 128, bias=False)
        self.w3 = nn.Linear(d, 128, bias=False)
        self.w2 = nn.Linear(128, d, bias=False)
        self.n1, self.n2 = nn.RMSNorm(d), nn.RMSNorm(d)
        inv_freq = 1.0 / 10000 ** (torch.arange(0, 16, 2).float() / 16)
        t = torch.arange(16).float()[:, None] * inv_freq[None]
        self.register_buffer("cos", t.cos())
        self.register_buffer("sin", t.sin())

    def rope(self, x):
        x1, x2 = x[..., ::2], x[..., 1::2]
        c, s = self.cos[: x.shape[-2]], self.sin[: x.shape[-2]]
        return torch.stack([x1 * c - x2 * s, x1 * s + x2 * c], -1).flatten(-2)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.wqkv(self.n1(x)).view(B, T, 3, self.h, C // self.h).permute(2, 0, 3, 1, 4)
        q, k = self.rope(q), self.rope(k)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(a.transpose(1, 2).reshape(B, T, C))
        return x + self.w2(F.silu(self.w1(self.n2(x))) * self.w3(self.n2(x)))


class Misc(nn.Module):
    """masked_fill, where, cumsum, topk, gather, sort, argmax, logsumexp, log_softmax."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 32)

    def forward(self, x, mask):
        y = self.fc(x).masked_fill(mask, -1e4)
        y = torch.where(y > 0, y, 0.1 * y).cumsum(-1) / 32
        v, i = y.topk(4, dim=-1)
        g = torch.gather(y, 1, i)
        srt = torch.sort(y, dim=-1, descending=True).values[:, :4]
        return ((v + g + srt).logsumexp(-1) + y.argmax(-1).float() * 0.01
                + F.log_softmax(y, -1).mean(-1))


class Conv1dNet(nn.Module):
    """Conv1d, BatchNorm1d, leaky_relu, AvgPool1d, Dropout(p=0)."""

    def __init__(self):
        super().__init__()
        self.c = nn.Conv1d(8, 16, 5, padding=2)
        self.bn = nn.BatchNorm1d(16)
        self.p = nn.AvgPool1d(2)
        self.drop = nn.Dropout(0.0)
        self.fc = nn.Linear(16 * 16, 4)

    def forward(self, x):
        return self.fc(self.drop(self.p(F.leaky_relu(self.bn(self.c(x))))).flatten(1))


class CELoss(nn.Module):
    """cross_entropy with label smoothing, nll_loss, binary_cross_entropy_with_logits."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 10)

    def forward(self, x, y):
        o = self.fc(x)
        return (F.cross_entropy(o, y, label_smoothing=0.1)
                + F.nll_loss(F.log_softmax(o, -1), y)
                + F.binary_cross_entropy_with_logits(o[:, 0], (y > 4).float()))


class BertLike(nn.Module):
    """padding_idx, non-affine LayerNorm, einsum attention, -inf key mask, bmm, Dropout(p=0)."""

    def __init__(self, d=32):
        super().__init__()
        self.emb = nn.Embedding(50, d, padding_idx=0)
        self.pos = nn.Embedding(16, d)
        self.ln = nn.LayerNorm(d, elementwise_affine=False)
        self.qkv = nn.Linear(d, 3 * d)
        self.o = nn.Linear(d, d)
        self.drop = nn.Dropout(0.0)  # p=0: dropout's random mask would differ from eager's
        self.cls = nn.Linear(d, 3)

    def forward(self, ids, mask):
        T = ids.shape[1]
        x = self.ln(self.emb(ids) + self.pos(torch.arange(T, device=ids.device))[None])
        q, k, v = self.qkv(x).chunk(3, -1)
        att = torch.einsum("bqd,bkd->bqk", q, k) / math.sqrt(q.shape[-1])
        att = att.masked_fill(~mask[:, None, :], float("-inf")).softmax(-1)
        x = x + self.o(torch.bmm(self.drop(att), v))
        return self.cls(x[:, 0])


class Decoder(nn.Module):
    """nn.TransformerDecoder (norm_first) with a causal mask and a memory padding mask."""

    def __init__(self):
        super().__init__()
        layer = nn.TransformerDecoderLayer(32, 4, 64, dropout=0.0, batch_first=True,
                                           norm_first=True)
        self.tr = nn.TransformerDecoder(layer, 2)

    def forward(self, tgt, mem, pad):
        m = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1], device=tgt.device)
        return self.tr(tgt, mem, tgt_mask=m, tgt_is_causal=True, memory_key_padding_mask=pad)


class Swinish(nn.Module):
    """torch.roll, window partition by view/permute, PixelShuffle, reflect-padded conv."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 16)
        self.ps = nn.PixelShuffle(2)
        self.conv = nn.Conv2d(4, 16, 3, padding=1, padding_mode="reflect")

    def forward(self, x):  # x: (B, 16, 8, 8)
        y = torch.roll(x, shifts=(2, 2), dims=(2, 3))
        B, C, H, W = y.shape
        w = y.view(B, C, H // 4, 4, W // 4, 4).permute(0, 2, 4, 3, 5, 1).reshape(-1, 16, C)
        w = self.proj(w).softmax(-1)
        y = w.reshape(B, H // 4, W // 4, 4, 4, C).permute(0, 5, 1, 3, 2, 4).reshape(B, C, H, W)
        return self.conv(self.ps(y)).flatten(1).logsumexp(-1)


class RotaryComplex(nn.Module):
    """Rotary embeddings in complex numbers: view_as_complex, a complex buffer, view_as_real."""

    def __init__(self):
        super().__init__()
        self.q = nn.Linear(16, 16)
        f = 1.0 / (10000 ** (torch.arange(0, 16, 2).float() / 16))
        t = torch.arange(8).float()
        self.register_buffer("freqs", torch.polar(torch.ones(8, 8), torch.outer(t, f)))

    def forward(self, x):  # x: (B, 8, 16)
        q = self.q(x).float()
        qc = torch.view_as_complex(q.reshape(*q.shape[:-1], -1, 2))
        return torch.view_as_real(qc * self.freqs).flatten(-2).to(x.dtype)


class Misc2(nn.Module):
    """one_hot, scatter_add, argsort, bucketize, clamp, cumprod, flip, amax, normalize, pad."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x, idx, lab):
        y = self.fc(x)
        z = y.scatter_add(1, idx, torch.ones_like(y)) + F.one_hot(lab, 8).to(y.dtype)
        r = torch.argsort(z, dim=-1)[:, :2].float()
        b = torch.bucketize(z, torch.tensor([-1.0, 0.0, 1.0], device=z.device)).float()
        c = z.clamp(-0.5, 0.5) + torch.where(z > 0, 1.0, -1.0) + F.normalize(z, dim=-1)
        d = torch.cumprod(torch.sigmoid(z), -1) + torch.flip(z, [1]) + z.amax(1, keepdim=True)
        return (c + d).sum(-1) + r.sum(-1) + b.mean(-1) + F.pad(z, (1, 1), value=0.5).var(-1)


class BoolIndex(nn.Module):
    """Assignment through a boolean index (y[y < 0] = 0.0) on a clone, and its backward."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        y = self.fc(x).clone()
        y[y < 0] = 0.0
        return y.sum() + y[:, ::2].mean()


class NormZoo(nn.Module):
    """BatchNorm (momentum=None), LayerNorm over 3 dims, tracked InstanceNorm, GroupNorm, LRN."""

    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm2d(4, momentum=None)
        self.ln = nn.LayerNorm([4, 6, 6])
        self.inorm = nn.InstanceNorm2d(4, track_running_stats=True)
        self.gn = nn.GroupNorm(2, 4, affine=False)
        self.lrn = nn.LocalResponseNorm(2)

    def forward(self, x):
        return self.bn(x) + self.ln(x) + self.inorm(x) + self.gn(x) + self.lrn(x)


class PoolZoo(nn.Module):
    """max_pool2d (ceil_mode, padding), avg_pool2d, adaptive pools, bicubic, tanh GELU."""

    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 8, 3, stride=2)

    def forward(self, x):
        y = self.c(x)
        a = F.max_pool2d(y, 3, 2, padding=1, ceil_mode=True)
        b = F.avg_pool2d(y, 2, count_include_pad=False)
        c = F.adaptive_max_pool2d(y, (2, 3))
        d = F.adaptive_avg_pool2d(y, (3, 2))
        e = F.interpolate(y, scale_factor=2, mode="bicubic", align_corners=True)
        return (a.mean() + b.mean() + c.sum() + d.sum() + e.std()
                + F.gelu(y, approximate="tanh").mean())


class Gated(nn.Module):
    """GLU, PReLU, ELU, Softplus, Mish, LogSigmoid, CELU, SELU, Tanhshrink."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 32)
        self.glu, self.prelu, self.elu = nn.GLU(), nn.PReLU(), nn.ELU()
        self.sp, self.mish, self.ls = nn.Softplus(beta=2), nn.Mish(), nn.LogSigmoid()
        self.cel, self.selu, self.tsh = nn.CELU(), nn.SELU(), nn.Tanhshrink()

    def forward(self, x):
        y = self.fc(x)
        a, b = y[:, :16], y[:, 16:]
        return (self.glu(y) + self.prelu(a) + self.elu(b) + self.sp(a) + self.mish(b)
                + self.ls(a) + self.cel(b) + self.selu(a) + self.tsh(b))


class Losses(nn.Module):
    """Eleven loss functions of torch.nn.functional on one linear layer's output."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 5)

    def forward(self, x, y, t):
        o = self.fc(x)
        return (F.smooth_l1_loss(o, t) + F.huber_loss(o, t, delta=0.5) + F.l1_loss(o, t)
                + F.kl_div(o.log_softmax(-1), t.softmax(-1), reduction="batchmean")
                + F.cross_entropy(o, y, reduction="sum", ignore_index=2) * 0.01
                + F.cosine_similarity(o, t).mean()
                + F.margin_ranking_loss(o[:, 0], o[:, 1], torch.sign(t[:, 0]))
                + F.soft_margin_loss(o, torch.sign(t))
                + F.multilabel_soft_margin_loss(o, (t > 0).float())
                + F.poisson_nll_loss(o, t.abs())
                + F.gaussian_nll_loss(o, t, o.detach().abs() + 0.1))


# --- inputs ---------------------------------------------------------------------------------

def R(*shape):
    return torch.randn(*shape, device=DEVICE)


def I(high, *shape):  # noqa: E743
    return torch.randint(high, shape, device=DEVICE)


def mask(*shape, p):
    return torch.rand(*shape, device=DEVICE) > p


ZOO = {  # name: (model class, inputs)
    "vit": (ViT, lambda: (R(4, 3, 16, 16),)),
    "encoder": (Encoder, lambda: (I(100, 4, 12),)),
    "lstm": (LSTMNet, lambda: (I(100, 4, 10),)),
    "gru": (GRUNet, lambda: (R(4, 7, 16),)),
    "packed_lstm": (PackedLSTM, lambda: (R(3, 5, 8), torch.tensor([5, 3, 2]).cpu())),
    "resnet": (ResNet, lambda: (R(4, 3, 16, 16),)),
    "mobile": (MobileBlock, lambda: (R(4, 8, 8, 8),)),
    "unet": (UNetish, lambda: (R(2, 4, 8, 8),)),
    "recsys": (RecSys, lambda: (I(1000, 20), torch.tensor([0, 5, 9, 15], device=DEVICE),
                                I(50, 4), R(4, 8))),
    "llama": (Llama, lambda: (R(2, 16, 64),)),
    "misc": (Misc, lambda: (R(8, 32), mask(8, 32, p=0.8))),
    "conv1d": (Conv1dNet, lambda: (R(4, 8, 32),)),
    "celoss": (CELoss, lambda: (R(8, 32), I(10, 8))),
    "bert": (BertLike, lambda: (I(50, 4, 16), mask(4, 16, p=0.2))),
    "decoder": (Decoder, lambda: (R(2, 10, 32), R(2, 7, 32), torch.tensor(
        [[False] * 7, [False] * 5 + [True] * 2], device=DEVICE))),
    "swin": (Swinish, lambda: (R(2, 16, 8, 8),)),
    "rotary": (RotaryComplex, lambda: (R(2, 8, 16),)),
    "misc2": (Misc2, lambda: (R(4, 8), I(8, 4, 8), I(8, 4))),
    "boolidx": (BoolIndex, lambda: (R(4, 8),)),
    "norms": (NormZoo, lambda: (R(3, 4, 6, 6),)),
    "pools": (PoolZoo, lambda: (R(2, 3, 15, 15),)),
    "gated": (Gated, lambda: (R(4, 16),)),
    "losses": (Losses, lambda: (R(6, 8), I(5, 6), R(6, 5))),
}


# --- the check ------------------------------------------------------------------------------

@pytest.fixture(autouse=True)
def _fresh():
    driver.reset()
    yield
    driver.reset()


def check_grads(eager: nn.Module, model: nn.Module):
    """Each parameter's gradient within an absolute tolerance scaled by the model's largest
    gradient: a bias before a normalization has a gradient of exactly zero in mathematics,
    and eager's is rounding noise that no relative tolerance can match."""
    pairs = [(name, p.grad, q.grad) for (name, p), q in
             zip(eager.named_parameters(), model.parameters(), strict=True)]
    for name, expected, actual in pairs:
        assert (actual is None) == (expected is None), f"{name}: gradient {actual} vs eager"
    scale = max(g.abs().max().item() for _, g, _ in pairs if g is not None)
    assert scale > 0, "no gradient at all: the test would compare nothing"
    for name, expected, actual in pairs:
        if expected is not None:
            torch.testing.assert_close(actual, expected, rtol=0, atol=GRAD_TOL * scale,
                                       msg=lambda m, name=name: f"gradient of {name}: {m}")


@pytest.mark.parametrize("name", sorted(ZOO))
def test_model_matches_eager(name):
    cls, make_inputs = ZOO[name]
    torch.manual_seed(0)
    inputs = make_inputs()
    torch.manual_seed(1)
    eager = cls().to(DEVICE)  # no dtype: .to(dtype) would make RotaryComplex's buffer real
    torch.manual_seed(1)
    model = cls().to(DEVICE)
    driver.reset()
    compiled = driver.compile(model)

    def close(actual, expected, what):
        torch.testing.assert_close(actual, expected, rtol=RTOL, atol=ATOL,
                                   msg=lambda m: f"{name}, {what}: {m}")

    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)  # every frame must compile
        for step in range(2):
            expected, actual = eager(*inputs), compiled(*inputs)
            close(actual, expected, f"training step {step}, output")
            expected.float().square().mean().backward()
            actual.float().square().mean().backward()
        check_grads(eager, model)
        for (buf, expected), actual in zip(eager.named_buffers(), model.buffers(), strict=True):
            close(actual, expected, f"buffer {buf} after training")

        eager.eval()
        model.eval()
        with torch.no_grad():
            close(compiled(*inputs), eager(*inputs), "eval output")
    assert compiled.graphs, "nothing was compiled"
