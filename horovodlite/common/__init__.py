"""Horovod's `horovod.common` names that users' scripts import directly, so that
`from horovod.common.exceptions import ...` becomes `from horovodlite.common.exceptions
import ...` by the same rename as the frontend's import line."""
