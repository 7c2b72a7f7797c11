"""The jobs backends are peers behind one protocol, chosen from one registry."""
from __future__ import annotations

import pytest

from toolkit.jobs import JobSpecError
from toolkit.jobs.backends import BACKENDS, REGISTRY, Backend, get_backend, register_backend
from toolkit.jobs.engines.local._run import RUNNERS


def test_every_registered_backend_implements_the_protocol(tmp_path):
    for name in REGISTRY:
        backend = get_backend(name, home=tmp_path)
        assert isinstance(backend, Backend), name
        assert backend.name == name


def test_supervised_backends_are_peers_not_subclasses_of_local():
    from toolkit.jobs.engines.local.backend import LocalBackend
    from toolkit.jobs.engines.ray.backend import RayBackend
    assert not issubclass(RayBackend, LocalBackend)
    assert {"local", "ray"} <= set(RUNNERS)


def test_an_option_of_another_backend_names_its_owner(tmp_path):
    with pytest.raises(JobSpecError, match=r"applies to the ray backend only; remove it or pass `backend='ray'`"):
        get_backend("local", home=tmp_path, placement="SPREAD")
    with pytest.raises(JobSpecError, match=r"does not apply to the ray backend \(only to the kubernetes backend\)"):
        get_backend("ray", home=tmp_path, namespace="ns")
    with pytest.raises(JobSpecError, match=r"backend: received 'rya'; expected one of local, .*Did you mean 'ray'"):
        get_backend("rya", home=tmp_path)


def test_a_new_backend_is_one_registration(tmp_path, monkeypatch):
    monkeypatch.setattr("toolkit.jobs.backends.REGISTRY", dict(REGISTRY))
    monkeypatch.setattr("toolkit.jobs.backends.BACKENDS", dict(BACKENDS))
    from toolkit.jobs.engines.local.backend import LocalBackend

    class Other(LocalBackend):
        name = "other"

    register_backend("other", lambda store, **_: Other(store), options=("knob",))
    assert get_backend("other", home=tmp_path, knob=1).name == "other"
