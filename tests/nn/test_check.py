"""Every nn block checks the rank and layout of what it is given and names itself and what it
expects (ShapeError at graph-build time), instead of broadcasting a wrong layout into a wrong result."""

from __future__ import annotations

import pytest

import luminal as lm
from luminal import nn


def _blocks(g):
    rope = nn.RoPE(g, "rope", 8, lm.shape.expr.num(0), lm.shape.expr.var("s"))
    # block: (callable, good input shapes, bad input shapes, what the message must contain)
    lin, emb, rms = nn.Linear(g, "l", 6, 3), nn.Embedding(g, "e", 10, 6), nn.RMSNorm(g, "n", 6)
    attn = nn.Attention(g, "attn", 16, 2, 1, 8, nn.KVCache("c0", 1, 32, 8))
    return {
        "Linear": (lin, [(6,), ("s", 6), (2, "s", 6)], [("s", 5), (6, 1)], ["Linear 'l'", "d_in=6"]),
        "Embedding.attend": (emb.attend, [("s", 6)], [("s", 1)], ["Embedding.attend 'e'", "dim=6"]),
        "RMSNorm": (rms, [("s", 6), (2, 3, 6)], [("s", 1), (6, "s")], ["RMSNorm 'n'", "dim=6"]),
        "LayerNorm": (nn.LayerNorm(g, "ln", 6), [("s", 6)], [("s", 1)], ["LayerNorm 'ln'", "dim=6"]),
        "GatedMLP": (nn.GatedMLP(g, "mlp", 6, 12), [("s", 6)], [("s", 12)], ["Linear 'mlp.gate_proj'", "d_in=6"]),
        "MLP": (nn.MLP(g, "fc", 6, 12), [("s", 6)], [("s", 1)], ["Linear 'fc.fc1'", "d_in=6"]),
        "Attention": (attn, [("s", 16)], [(1, "s", 16), ("s", 8), (16,)], ["Attention 'attn'", "(s, dim=16)"]),
        "RoPE": (rope, [("s", 2, 8)], [(1, "s", 2, 8), ("s", 8), ("s", 2, 4), (3, 2, 8)], ["RoPE", "head_dim=8"]),
        "Conv1d": (nn.Conv1d(g, "cv", 4, 2, 3), [(4, 9)], [(2, 4, 9), (9, 4), (4,)], ["Conv1d 'cv'", "c_in=4"]),
    }


@pytest.mark.parametrize("block", sorted(_blocks(lm.Graph())))
def test_blocks_accept_their_layout_and_name_what_they_expect(block):
    g = lm.Graph()
    fn, good, bad, needles = _blocks(g)[block]
    for k, shape in enumerate(good):
        assert isinstance(fn(g.tensor(f"ok{k}", shape)), lm.GraphTensor)
    for k, shape in enumerate(bad):
        with pytest.raises(lm.ShapeError) as info:
            fn(g.tensor(f"bad{k}", shape))
        msg = str(info.value)
        assert all(n in msg for n in needles), msg


def test_attend_and_cache_update_check_ranks():
    g = lm.Graph()
    q, k = g.tensor("q", (2, 3, "s", 8)), g.tensor("k", (2, "t", 8))
    assert nn.attend(q, k, k, None, 0.5).shape[2] == "s"
    with pytest.raises(lm.ShapeError, match="attend: expects q as"):
        nn.attend(g.tensor("q3", (2, "s", 8)), k, k, None, 0.5)
    with pytest.raises(lm.ShapeError, match=r"attend: expects k and v as \(n_kv=2"):
        nn.attend(q, g.tensor("k4", (1, 2, "t", 8)), k, None, 0.5)
    cache = nn.KVCache("c", 2, 16, 8)
    with pytest.raises(lm.ShapeError, match=r"KVCache 'c': expects new rows \(n_kv=2, s, head_dim=8\)"):
        cache.update(g, g.tensor("kn", ("s", 2, 8)), g.tensor("vn", ("s", 2, 8)), lm.shape.expr.num(0))


def test_block_given_a_non_tensor():
    with pytest.raises(lm.ShapeError, match="expects a GraphTensor"):
        nn.Linear(lm.Graph(), "l", 2, 2)([1.0, 2.0])
