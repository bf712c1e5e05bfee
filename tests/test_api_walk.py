"""The API walker (tests/api_walk.py) finds what it claims to: a missing name, a missing or
moved parameter, a different default, an extra parameter without a default."""
import types

from api_walk import check


def _module():
    m = types.SimpleNamespace(Average=1, Sum=0)

    def allreduce(tensor, name=None, op=1, extra=None):
        pass

    def moved(b, a=None):
        pass

    def extra_required(tensor, must):
        pass

    def kwonly(x, *, op=1):
        pass

    m.allreduce, m.moved, m.extra_required, m.kwonly = allreduce, moved, extra_required, kwonly
    return m


def test_compatible_signatures_pass():
    m = _module()
    assert check(m, "allreduce(tensor, name=None, op=Average)") == []
    assert check(m, "allreduce(tensor)") == []
    assert check(m, "Sum") == []
    assert check(m, "kwonly(x, *, op=Average)") == []


def test_incompatible_signatures_are_reported():
    m = _module()
    assert check(m, "missing_name") == ["missing_name: missing"]
    assert "missing" in check(m, "allreduce(tensor, name=None, op=Average, average=None)")[0]
    assert "default" in check(m, "allreduce(tensor, name='x')")[0]
    assert "default" in check(m, "allreduce(tensor, name=None, op=Sum)")[0]
    assert "position" in check(m, "moved(a, b)")[0]
    assert "no default" in check(m, "extra_required(tensor)")[0]
    assert "position" in check(m, "kwonly(x, op=Average)")[0]  # ours is keyword-only
