"""`import horovodlite as hvd` against Horovod 0.28's names (tests/horovod_api.py): the
basics and process sets, and the collectives with the parameters Horovod users pass
(the numpy API is Horovod's torch API on arrays)."""
import horovodlite
from horovod_api import BASICS, COLLECTIVES, walk


def test_every_horovod_name_exists_with_a_compatible_signature():
    problems, checked = walk(horovodlite, BASICS, COLLECTIVES)
    assert not problems, "\n".join(problems)
    assert len(checked) == len(BASICS) + len(COLLECTIVES)


def test_the_checker_notices_incompatible_signatures():
    from horovod_api import REQUIRED, check_params

    def renamed(t, root=0, name=None):
        pass

    def keyword_only(tensor, *, root_rank, name=None, extra):
        pass

    spec = [("tensor", REQUIRED), ("root_rank", REQUIRED), ("name", None)]
    assert any("no parameter 'root_rank'" in p for p in check_params(horovodlite, "f", renamed, spec))
    got = check_params(horovodlite, "f", keyword_only, spec)
    assert any("not positional" in p for p in got) and any("extra" in p for p in got)
    assert any("defaults to" in p for p in check_params(
        horovodlite, "f", lambda tensor, root_rank, name="x": 0, spec))
