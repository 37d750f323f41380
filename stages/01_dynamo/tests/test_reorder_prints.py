"""[Note: a print after the graph] (side_effects.py): with ``config.reorder_prints`` a print
whose arguments are known at trace time runs after the graph instead of breaking it; the
text and its order against other prints and writes stay eager's."""

import io

import dynamo
import pytest
import torch
from dynamo import config

SINK = io.StringIO()


@pytest.fixture(autouse=True)
def reorder(monkeypatch):
    monkeypatch.setattr(config, "reorder_prints", True)
    SINK.seek(0)
    SINK.truncate()


def constant_prints(x):
    print("step", x.shape[0], sep="=", file=SINK)
    y = x.sin() * 2
    print("after", end="!\n", file=SINK)
    return y + 1


def test_a_print_of_constants_joins_the_graph(backend, no_fallback):
    opt = dynamo.optimize(backend, fullgraph=True)(constant_prints)
    x = torch.randn(3)
    torch.testing.assert_close(opt(x), constant_prints(x))
    assert SINK.getvalue() == "step=3\nafter!\n" * 2
    assert len(backend.graphs) == 1


def prints_around_a_break(x, log):
    print("one", file=SINK)
    y = x.cos()
    print("two", y.sum().item() > -10, file=SINK)  # .item(): a break, after "one" ran
    log.append("three")  # a write pending: the print after it breaks instead
    print("four", file=SINK)
    return y * 2


def test_order_against_breaks_and_writes(backend):
    opt = dynamo.optimize(backend)(prints_around_a_break)
    x, log = torch.randn(3), []
    torch.testing.assert_close(opt(x, log), prints_around_a_break(x, []))
    assert SINK.getvalue() == "one\ntwo True\nfour\n" * 2 and log == ["three"]


def tensor_print(x):
    print(x.sum(), file=SINK)  # needs the graph's value: still a break
    return x + 1


def test_a_print_of_a_tensor_still_breaks(backend, capsys):
    opt = dynamo.optimize(backend)(tensor_print)
    x = torch.ones(2)
    torch.testing.assert_close(opt(x), x + 1)
    assert SINK.getvalue() == "tensor(2.)\n"


def test_with_reordering_off_a_print_breaks(monkeypatch, backend):
    monkeypatch.setattr(config, "reorder_prints", False)
    opt = dynamo.optimize(backend)(constant_prints)
    x = torch.randn(3)
    torch.testing.assert_close(opt(x), constant_prints(x))
    assert len(backend.graphs) == 2  # the print splits the graph
