"""Token auth on a real local Ray head (RAY_AUTH_MODE=token, the token from [cluster] token_file):
the dashboard answers 401 without the token, 403 with a wrong one, and works with it; the
supervisor starts and stops a job with it; a second workspace that names the same cluster by its
URL (a "remote" cluster) is checked by ``cluster up`` with its token and refused without one."""

from __future__ import annotations

import sys

import pytest

from backend.supervisor.rayjobs import RayApiError, RayJobsClient
from backend.supervisor.supervisor import Supervisor
from specdeck_types.process import Kind, ProcessSpec, ProcState as S
from state.store import Store
from tests.supervisor.conftest import wait_for
from tests.supervisor.test_ray_helpers import cli, make_workspace, needs_ray, remove_workspace, start_cluster

pytestmark = [needs_ray, pytest.mark.slow, pytest.mark.timeout(300)]

TOKEN = "specdeck-test-token-0123456789abcdef"
PY = sys.executable


@pytest.fixture(scope="module")
def ray():
    root = make_workspace("", token=TOKEN)
    rc = None
    try:
        rc = start_cluster(root)
        yield rc
    finally:
        if rc is not None:
            rc.close()
        remove_workspace(root)


def test_dashboard_wants_the_token(ray):
    address = ray.cluster.address()
    with pytest.raises(RayApiError) as e:
        RayJobsClient(address).version()
    assert e.value.status == 401
    with pytest.raises(RayApiError) as e:
        RayJobsClient(address, token="not-the-token").version()
    assert e.value.status == 403
    assert RayJobsClient(address, token=TOKEN).version()["ray_version"] == "2.60.0"


def test_supervisor_runs_a_job_with_the_token(ray):
    store = Store(ray.root / "state.db")
    sup = Supervisor(store, ray.root / "run", default_cwd=ray.root)
    try:
        spec = ProcessSpec(name="tok-job", kind=Kind.OTHER, argv=(PY, "-c", "import time; time.sleep(120)"),
                           log_path=str(ray.root / "logs" / "tok-job.log"), where="ray", stop_grace_s=1)
        sup.sync_specs([spec], prune=False)
        v = sup.start("tok-job", actor="carol")
        wait_for(lambda: sup.view("tok-job").state == S.RUNNING, timeout_s=90, interval_s=0.3, poll=sup.poll)
        assert RayJobsClient(ray.cluster.address(), token=TOKEN).info(v.submission_id).metadata["specdeck_user"] == "carol"
        assert sup.stop("tok-job", wait=True).state == S.EXITED
    finally:
        sup.close()
        store.close()


def test_remote_address_is_checked_with_its_token_and_refused_without(ray):
    address = ray.cluster.address()
    remote = make_workspace("")
    try:
        text = (remote / "specdeck.toml").read_text().replace('address = "local"', f'address = "{address}"')
        (remote / "specdeck.toml").write_text(text.replace("num_gpus = 2\n", 'num_gpus = 2\ntoken_file = "t"\n'))
        (remote / "t").write_text(TOKEN)
        code, out, err = cli(remote, "cluster", "up")
        assert code == 0 and "answers with the token" in out, err
        (remote / "t").write_text("wrong")
        code, out, err = cli(remote, "cluster", "up")
        assert code == 1 and "HTTP 403" in err
        code, out, err = cli(remote, "cluster", "down")
        assert code == 1 and "ends only a head Specdeck started" in err
        (remote / "specdeck.toml").write_text(text)  # no token_file for a remote address
        code, out, err = cli(remote, "cluster", "status")
        assert code == 2 and "token_file" in err
    finally:
        remove_workspace(remote)
