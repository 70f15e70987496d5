"""Edges of the scale-out clients: Ray's stop wait in whole seconds, a submit whose answer was lost, and
answers cut mid-body (``http.client.IncompleteRead`` is no ``OSError``) from Ray's dashboard, the router
and Prometheus, each turned into the client's own error."""

from __future__ import annotations

import socket
import threading

import pytest

from backend.flows.cost import host_port
from backend.sglang.routerclient import RouterClient, RouterError
from backend.supervisor.raybackend import _submitted_after_all, stop_wait_s
from backend.supervisor.rayjobs import JobInfo, RayApiError, RayJobsClient
from backend.telemetry.promql import PromClient, PromError


@pytest.mark.parametrize("grace, want", [(7.5, 8), (10.0, 10), (0.0, 1), (0.2, 1), (1e6, 1000000), (3600.0, 3600)])
def test_the_stop_wait_ray_reads_with_int_is_whole_seconds_rounded_up(grace, want):
    got = stop_wait_s(grace)
    assert got == want and int(str(got)) == got  # Ray's int() reads it


class _Client:
    def __init__(self, info=None, info_fails=False, stop_fails=False):
        self._info, self.info_fails, self.stop_fails, self.stopped = info, info_fails, stop_fails, []

    def info(self, sid):
        if self.info_fails:
            raise RayApiError("GET: the Ray dashboard does not answer: timed out")
        return self._info

    def stop(self, sid):
        self.stopped.append(sid)
        if self.stop_fails:
            raise RayApiError("POST: the Ray dashboard does not answer")
        return True


def test_a_submit_whose_answer_was_lost_is_followed_when_ray_has_the_job_and_stopped_when_unsure():
    job = JobInfo(submission_id="r1", status="PENDING", message="", error_type=None, start_time=None, end_time=None,
                  driver_exit_code=None, driver_node_id=None, driver_agent_http_address=None, metadata={},
                  entrypoint="x")
    assert _submitted_after_all(_Client(info=job), "r1") is True
    missing = _Client(info=None)
    assert _submitted_after_all(missing, "r1") is False and missing.stopped == []
    unsure = _Client(info_fails=True)
    assert _submitted_after_all(unsure, "r1") is False and unsure.stopped == ["r1"]
    assert _submitted_after_all(_Client(info_fails=True, stop_fails=True), "r1") is False


@pytest.fixture
def cut_server():
    """An HTTP server on 127.0.0.1 that promises 1,000 bytes and closes after 3."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    stop = threading.Event()

    def serve():
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(2)
                try:
                    conn.recv(65536)
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"a")
                except OSError:
                    pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.getsockname()[1]}"
    finally:
        stop.set()
        t.join(5)
        srv.close()


def test_an_answer_cut_mid_body_is_each_clients_own_error(cut_server):
    with pytest.raises(RayApiError, match="does not answer|not JSON"):
        RayJobsClient(cut_server, timeout_s=5).version()
    with pytest.raises(RouterError, match="no answer"):
        RouterClient(cut_server, timeout_s=5).workers()
    with pytest.raises(PromError) as err:
        PromClient(cut_server, timeout_s=5).targets()
    assert err.value.kind == "unreachable" and "IncompleteRead" in err.value.message


def test_a_server_address_with_a_bad_port_matches_no_server_instead_of_failing():
    assert host_port("http://localhost:8000") == ("127.0.0.1", 8000)
    assert host_port("http://10.0.0.7:99999") == ("10.0.0.7", None)
    assert host_port("http://10.0.0.7:abc") == ("10.0.0.7", None)


def test_the_heads_folders_must_be_this_users_own_private_folders(tmp_path):
    import os

    from backend.supervisor.raycluster import ClusterError, _check_own_private_dir

    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    _check_own_private_dir(mine)
    open_to_all = tmp_path / "open"
    open_to_all.mkdir()
    open_to_all.chmod(0o777)
    with pytest.raises(ClusterError, match="others may read or write it"):
        _check_own_private_dir(open_to_all)
    link = tmp_path / "link"
    link.symlink_to(mine)
    with pytest.raises(ClusterError, match="is not a folder"):
        _check_own_private_dir(link)
    other = tmp_path / "other"
    other.mkdir(mode=0o700)
    if os.getuid() == 0:  # only root can give a folder away
        os.chown(other, 12345, -1)
        with pytest.raises(ClusterError, match="belongs to user id 12345"):
            _check_own_private_dir(other)
