"""ElasticSampler's bookkeeping without MPI (rank and size patched): shards cover the
epoch, processed indices are skipped after a reset onto another world size, set_epoch
starts afresh; and the discovery script's host:slots parsing."""
import pytest

torch = pytest.importorskip("torch")

import horovodlite.basics as basics  # noqa: E402
from horovodlite.elastic.hosts import parse_hosts  # noqa: E402
from horovodlite.torch.elastic import ElasticSampler  # noqa: E402


def world(monkeypatch, rank, size):
    monkeypatch.setattr(basics, "rank", lambda: rank)
    monkeypatch.setattr(basics, "size", lambda: size)


def shards(monkeypatch, dataset, size, processed=(), epoch=0):
    out = []
    for r in range(size):
        world(monkeypatch, r, size)
        s = ElasticSampler(dataset, shuffle=True, seed=3)
        s.load_state_dict({"epoch": epoch, "processed_indices": list(processed)})
        out.append(s)
    return out


def test_shards_cover_the_epoch_and_reset_skips_what_was_done(monkeypatch):
    data = list(range(23))
    three = shards(monkeypatch, data, 3)
    assert all(len(s) == 8 for s in three)  # ceil(23 / 3), padded
    assert set().union(*(set(s) for s in three)) == set(data)
    # Two batches of 3 done on each rank, then a rank dies: the union is re-sharded.
    done = set()
    for s in three:
        s.record_batch(0, 3)
        s.record_batch(1, 3)
        done |= s.processed_indices
    assert len(done) == 18
    two = shards(monkeypatch, data, 2, processed=done)
    rest = set(data) - done
    assert all(len(s) == 3 for s in two)  # ceil(5 / 2)
    assert set().union(*(set(s) for s in two)) == rest
    assert not (set(two[0]) & set(two[1])) or len(rest) % 2  # only padding repeats


def test_set_epoch_forgets_and_reshuffles(monkeypatch):
    world(monkeypatch, 0, 1)
    s = ElasticSampler(list(range(10)), seed=1)
    first = list(s)
    s.record_indices(first[:4])
    s.reset()
    assert len(s) == 6
    s.set_epoch(1)
    assert len(s) == 10 and list(s) != first and sorted(s) == list(range(10))


def test_parse_hosts():
    assert parse_hosts("a:2\nb:1\n# c:9\n\nb:3\nd\n", canonical=False) == {"a": 2, "b": 4, "d": 1}
    with pytest.raises(ValueError, match="host:slots"):
        parse_hosts("a:two", canonical=False)


def test_launcher_elastic_command(tmp_path):
    from horovodlite.run import launcher

    disc = tmp_path / "hosts.sh"
    disc.write_text("echo localhost:2\necho otherhost:1\n")
    args = launcher.parse_args(["--elastic", "--min-np", "2", "--max-np", "4", "--reset-limit", "3",
                                "--host-discovery-script", f"sh {disc}", "python", "train.py"])
    assert args.np == 3 and args.hosts == "localhost:2,otherhost:1"
    env = launcher.job_env(args, base={})
    assert env["HOROVODLITE_ELASTIC"] == "1" and env["HOROVODLITE_ELASTIC_MIN_NP"] == "2"
    assert env["HOROVODLITE_ELASTIC_MAX_NP"] == "4" and env["HOROVODLITE_ELASTIC_RESET_LIMIT"] == "3"
    assert str(disc) in env["HOROVODLITE_ELASTIC_DISCOVERY"]
    cmd = launcher.build_command(args, env)
    assert cmd[cmd.index("--with-ft") + 1] == "ulfm" and "--oversubscribe" in cmd
    assert "HOROVODLITE_ELASTIC_DISCOVERY" in cmd


def test_launcher_elastic_errors(capsys):
    from horovodlite.run import launcher

    with pytest.raises(SystemExit):
        launcher.parse_args(["--min-np", "2", "-np", "2", "python", "x.py"])
    assert "need --elastic" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        launcher.parse_args(["--elastic", "-np", "1", "--min-np", "2", "python", "x.py"])
    assert "below --min-np 2" in capsys.readouterr().err


def _sgd_model():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 2))
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def _train(model, opt, steps):
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(5, 4)).square().sum().backward()
        opt.step()


def _snapshot(model, opt):
    return ([t.clone() for t in model.state_dict().values()],
            [s["momentum_buffer"].clone() for s in opt.state.values()])


def _equal(a, b):
    return all(torch.equal(x, y) for x, y in zip(a[0] + a[1], b[0] + b[1])) and \
        len(a[0]) == len(b[0]) and len(a[1]) == len(b[1])


def test_torch_state_commit_copies_into_the_last_commit_and_restore_is_exact():
    """A commit reuses the buffers of the previous one; restore gives back the committed
    values exactly, also twice in a row (the optimizer must not keep the saved tensors,
    or its steps after the first restore would change the commit)."""
    from horovodlite.torch.elastic import TorchState

    model, opt = _sgd_model()
    _train(model, opt, 2)  # momentum buffers exist
    state = TorchState(model, opt, step=0)
    ptrs = [t.data_ptr() for t in state._handlers["model"]._saved.values()]
    _train(model, opt, 3)
    state.step = 3
    state.save()
    assert [t.data_ptr() for t in state._handlers["model"]._saved.values()] == ptrs
    committed = _snapshot(model, opt)
    for _ in range(2):
        _train(model, opt, 2)
        state.step = 99
        assert not _equal(_snapshot(model, opt), committed)
        state.restore()
        assert _equal(_snapshot(model, opt), committed) and state.step == 3


def test_torch_state_commit_follows_a_changed_state_dict():
    """Optimizer state appearing after the first commit (or shapes changing) is saved
    afresh, not squeezed into the old buffers."""
    from horovodlite.torch.elastic import TorchState

    model, opt = _sgd_model()
    state = TorchState(model, opt)  # no momentum yet
    assert state._handlers["optimizer"]._saved["state"] == {}
    _train(model, opt, 1)
    state.save()
    committed = _snapshot(model, opt)
    _train(model, opt, 2)
    state.restore()
    assert _equal(_snapshot(model, opt), committed)
