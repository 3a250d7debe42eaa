"""The service's API with FastAPI's TestClient: every endpoint, auth on and off, two users who cannot see each
other's jobs, runs or models, path and URI traversal refused without reading a file, size caps, CSRF, the queue's
claims, leases and limits."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from twinkle_core.errors import TwinkleError
from twinkle_core.serve import Accounts, JobQueue, ServerConfig, create_app
from twinkle_core.serve.config import DataAccessError, check_data_uri

JOB = {"algorithm": "tabular-mlp", "hyperparams": {"max_epochs": 2, "progress_bar": False}}


@pytest.fixture()
def home(tmp_path: Path, cancer_csv: Path) -> Path:
    home = tmp_path / "home"
    (home / "datasets").mkdir(parents=True)
    shutil.copy(cancer_csv, home / "datasets" / "cancer.csv")
    return home


@pytest.fixture()
def service(home: Path) -> dict:
    config = ServerConfig(home=str(home), max_queued_per_user=5)
    accounts = Accounts(config.db_path)
    tokens = {name: accounts.add_user(name, admin=name == "root") for name in ("alice", "bob", "root")}
    client = TestClient(create_app(config))
    return {"config": config, "client": client, "tokens": tokens, "accounts": accounts,
            "data": str(home / "datasets" / "cancer.csv"), "home": home}


def auth(service: dict, name: str) -> dict:
    return {"Authorization": f"Bearer {service['tokens'][name]}"}


def submit(service: dict, name: str, **extra) -> dict:
    response = service["client"].post("/api/v1/jobs", headers=auth(service, name),
                                      json={**JOB, "data": service["data"], **extra})
    assert response.status_code == 201, response.text
    return response.json()


def test_tokens_are_required_and_only_their_hash_is_stored(service: dict) -> None:
    client = service["client"]
    assert client.get("/api/v1/health").json() == {"status": "ok"}  # liveness needs no token
    for path in ("/api/v1/me", "/api/v1/jobs", "/api/v1/runs", "/api/v1/models", "/api/v1/algorithms", "/api/v1/server"):
        response = client.get(path)
        assert response.status_code == 401 and response.headers["www-authenticate"] == "Bearer", path
    assert client.get("/api/v1/me", headers={"Authorization": "Bearer tw_wrong"}).status_code == 401
    assert client.get("/api/v1/me", headers={"Authorization": "Basic abc"}).status_code == 401
    assert client.get("/api/v1/me", headers=auth(service, "alice")).json() == {"name": "alice", "admin": False}
    raw = Path(service["config"].db_path).read_bytes() + b"".join(
        p.read_bytes() for p in Path(service["config"].db_path).parent.glob("*-wal"))
    assert not any(token.encode() in raw for token in service["tokens"].values())
    with pytest.raises(TwinkleError, match="exists"):
        service["accounts"].add_user("alice")
    with pytest.raises(TwinkleError, match="not allowed"):
        service["accounts"].add_user("../evil")
    new = service["accounts"].new_token("bob")
    assert client.get("/api/v1/me", headers=auth(service, "bob")).status_code == 401  # the old token is dead
    assert client.get("/api/v1/me", headers={"Authorization": f"Bearer {new}"}).json()["name"] == "bob"


def test_a_submitted_job_is_checked_like_a_trainer_and_queued_with_why_it_waits(service: dict) -> None:
    client = service["client"]
    job = submit(service, "alice", priority=5)
    assert job["state"] == "queued" and job["user"] == "alice" and job["priority"] == 5
    assert "no worker is running" in job["pending_reason"]
    assert job["transitions"][0]["state"] == "queued" and job["transitions"][0]["reason"] == "submitted"
    assert client.get(f"/api/v1/jobs/{job['id']}", headers=auth(service, "alice")).json()["id"] == job["id"]
    bad = {"/api/v1/jobs": [
        ({**JOB, "algorithm": "tabular-mpl", "data": service["data"]}, 400, "did you mean 'tabular-mlp'"),
        ({**JOB, "data": service["data"], "hyperparams": {"max_epochs": "many"}}, 400, "max_epochs"),
        ({**JOB, "data": service["data"], "hyperparams": {"no_such": 1}}, 400, "no_such"),
        ({**JOB, "data": service["data"], "code": "import os"}, 422, "extra"),
        ({**JOB, "data": service["data"], "monitor": {"alert_rules": {"val_loss": "sometimes"}}}, 400, "val_loss"),
        ({**JOB, "data": service["data"], "monitor": {"webhook": "http://x"}}, 422, "webhook"),
        ({**JOB, "data": service["data"], "priority": 1000}, 422, "priority"),
        ({**JOB, "data": "/etc/passwd"}, 403, "not under a data root"),
        ({**JOB, "data": service["data"] + ".missing"}, 400, "does not exist on the server"),
    ]}
    for body, status, words in bad["/api/v1/jobs"]:
        response = client.post("/api/v1/jobs", headers=auth(service, "alice"), json=body)
        assert response.status_code == status and words in response.text, (body, response.text)
    audit = client.get("/api/v1/audit", headers=auth(service, "root")).json()
    assert [a["action"] for a in audit] == ["submit"] and audit[0]["job"] == job["id"]


def test_the_per_user_queue_limit_answers_429(service: dict) -> None:
    for _ in range(5):
        submit(service, "alice")
    response = service["client"].post("/api/v1/jobs", headers=auth(service, "alice"), json={**JOB, "data": service["data"]})
    assert response.status_code == 429 and "5 queued jobs" in response.text
    submit(service, "bob")  # another user's queue is their own


def test_two_users_see_only_their_own_jobs_runs_and_models(service: dict, home: Path) -> None:
    client = service["client"]
    mine, theirs = submit(service, "alice"), submit(service, "bob")
    # a run and a published model of bob's, as a worker and `twinkle publish` would leave them
    from twinkle_core import RunStore

    store = RunStore(str(home))
    record = store.create_run("bob", "default", algorithm="tabular-mlp", task="tabular_classification")
    Path(store.path(record.id, "plan.json")).write_text("{}")
    (home / "models" / "bobs-model").mkdir(parents=True)
    (home / "models" / "bobs-model" / "model.json").write_text(json.dumps({"run": record.uri, "algorithm": "tabular-mlp"}))
    (home / "models" / "bobs-model" / "model.ckpt").write_bytes(b"weights")
    alice, bob = auth(service, "alice"), auth(service, "bob")
    assert [j["id"] for j in client.get("/api/v1/jobs", headers=alice).json()] == [mine["id"]]
    assert client.get("/api/v1/jobs?user=bob", headers=alice).json() == []
    for path in (f"/api/v1/jobs/{theirs['id']}", f"/api/v1/jobs/{theirs['id']}/logs", f"/api/v1/jobs/{theirs['id']}/metrics",
                 f"/api/v1/jobs/{theirs['id']}/events", f"/api/v1/runs/{record.id}", f"/api/v1/runs/{record.id}/files",
                 f"/api/v1/runs/{record.id}/metrics", f"/api/v1/runs/{record.id}/files/plan.json",
                 "/api/v1/models/bobs-model", "/api/v1/models/bobs-model/files/model.ckpt"):
        assert client.get(path, headers=alice).status_code == 404, path  # as if it did not exist
    assert client.post(f"/api/v1/jobs/{theirs['id']}/cancel", headers=alice).status_code == 404
    assert client.get("/api/v1/runs", headers=alice).json() == [] and client.get("/api/v1/models", headers=alice).json() == []
    assert client.get("/api/v1/audit", headers=alice).status_code == 403
    # bob sees his; the admin sees everyone's
    assert [r["uri"] for r in client.get("/api/v1/runs", headers=bob).json()] == [record.uri]
    assert client.get(f"/api/v1/runs/{record.id}/files/plan.json", headers=bob).json() == {}
    assert [f["path"] for f in client.get(f"/api/v1/runs/{record.id}/files", headers=bob).json()] == ["plan.json"]
    assert client.get("/api/v1/models/bobs-model/files/model.ckpt", headers=bob).content == b"weights"
    assert [m["name"] for m in client.get("/api/v1/models", headers=bob).json()] == ["bobs-model"]
    assert client.get(f"/api/v1/runs/{record.id}", headers=bob).json()["uri"] == record.uri
    assert client.get(f"/api/v1/runs/{record.id}/metrics", headers=bob).json() == {"run": record.uri, "rows": []}
    model = client.get("/api/v1/models/bobs-model", headers=bob).json()
    assert model["run"] == record.uri and {f["path"] for f in model["files"]} == {"model.json", "model.ckpt"}
    assert len(client.get("/api/v1/jobs", headers=auth(service, "root")).json()) == 2
    assert client.get(f"/api/v1/jobs/{theirs['id']}", headers=auth(service, "root")).status_code == 200
    # cancelling a queued job ends it now; the audit log has both actions
    cancelled = client.post(f"/api/v1/jobs/{mine['id']}/cancel", headers=alice).json()
    assert cancelled["state"] == "cancelled" and "cancelled by alice" in cancelled["reason"]
    actions = [(a["action"], a["user"]) for a in client.get("/api/v1/audit", headers=auth(service, "root")).json()]
    assert actions == [("cancel", "alice"), ("submit", "bob"), ("submit", "alice")]


def test_path_and_uri_traversal_is_refused_and_reads_nothing(service: dict, home: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    client = service["client"]
    from twinkle_core import RunStore

    store = RunStore(str(home))
    record = store.create_run("alice", "default", algorithm="tabular-mlp", task="tabular_classification")
    Path(store.path(record.id, "plan.json")).write_text("{}")
    secret = tmp_path / "secret.txt"
    secret.write_text("secret")
    os.symlink(secret, store.path(record.id, "link.txt"))  # a link inside the run that leads out
    opened: list[str] = []
    real_open = open

    def watching_open(file, *args, **kwargs):  # noqa: ANN001, ANN202
        if str(file).endswith(("secret.txt", "passwd", "catalogue.sqlite")):
            opened.append(str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr("builtins.open", watching_open)
    alice = auth(service, "alice")
    base = f"/api/v1/runs/{record.id}/files/"
    for attempt in ("../../../../catalogue.sqlite", "..%2f..%2f..%2f..%2fcatalogue.sqlite", "%2e%2e/%2e%2e/x",
                    "link.txt", "/etc/passwd", "%2fetc%2fpasswd", "checkpoints/../../run1/plan.json", "a\\..\\..\\x",
                    "plan.json%00.txt", "checkpoints%2f..%2f..%2f..%2fbob%2fdefault%2frun1%2fplan.json"):
        response = client.get(base + attempt, headers=alice)
        assert 400 <= response.status_code < 500 and b"secret" not in response.content, (attempt, response.status_code)
    for attempt in ("..", "../bob", "%2e%2e"):
        assert 400 <= client.get(f"/api/v1/models/{attempt}/files/model.json", headers=alice).status_code < 500
        assert 400 <= client.get(f"/api/v1/runs/alice/default/{attempt}/files/plan.json", headers=alice).status_code < 500
    assert opened == []
    assert client.get(base + "plan.json", headers=alice).status_code == 200
    # data URIs: only under the data roots, never into the store, never through a link that leads out
    (home / "datasets" / "escape").symlink_to(home / "runs")
    for uri, words in (("/etc/passwd", "not under a data root"), ("relative/cancer.csv", "relative"),
                       (f"{home}/datasets/../runs/alice/default/run1/plan.json", "'..' segment"),
                       (f"{home}/datasets/sub/../cancer.csv", "'..' segment"),  # inside the root: refused as documented
                       (f"{home}/datasets/escape/alice/default/run1/plan.json", "not under a data root"),
                       ("twinkle://bob/default/run1", "run store"), ("s3://other-bucket/data", "not under a data root"),
                       ("file:///etc/shadow", "not under a data root"), ("http://169.254.169.254/latest", "data root"),
                       (f"{home}/datasets/x\x00y", "control")):
        with pytest.raises(DataAccessError, match=words):
            check_data_uri(uri, service["config"])
        response = client.post("/api/v1/jobs", headers=alice, json={**JOB, "data": uri})
        assert response.status_code in (403, 422), (uri, response.text)
    # a hyperparameter that names a file is held to the same rule: weights of another user's run are refused
    for weights, words in (("twinkle://bob/default/run1", "not a run or model of yours"), ("/etc/passwd", "data root"),
                           ("twinkle://models/../runs/bob", "not a run or model of yours"),
                           (f"file://{home}/runs/bob/default/run1/checkpoints/best.ckpt", "weights")):
        response = client.post("/api/v1/jobs", headers=alice, json={"algorithm": "resnet18", "data": service["data"],
                                                                    "hyperparams": {"weights": weights}})
        assert response.status_code == 403 and words in response.text, (weights, response.text)
    # ... and so is one inside a list of objects (reinforcement learning's rewards with their options)
    nested = client.post("/api/v1/jobs", headers=alice, json={"algorithm": "resnet18", "data": service["data"],
                                                             "hyperparams": {"rewards": [{"name": "x",
                                                                                          "path": "/etc/passwd"}]}})
    assert nested.status_code == 403 and "hyperparameter rewards" in nested.text, nested.text
    own = client.post("/api/v1/jobs", headers=alice, json={"algorithm": "resnet18", "data": service["data"],
                                                           "hyperparams": {"weights": "twinkle://alice/default/run1"}})
    assert own.status_code == 201, own.text
    roots = ServerConfig(home=str(home), data_roots=[str(home), "s3://team-data/sets"])
    with pytest.raises(DataAccessError, match="inside the server's run store"):  # a root that contains the store
        check_data_uri(f"{home}/runs/bob/default/run1/plan.json", roots)
    assert check_data_uri("s3://team-data/sets/digits", roots) == "s3://team-data/sets/digits"
    with pytest.raises(DataAccessError):
        check_data_uri("s3://team-data/sets/../private", roots)
    with pytest.raises(DataAccessError):
        check_data_uri("s3://team-data/setsevil/x", roots)


def test_request_bodies_are_size_capped(service: dict) -> None:
    """Proves an API body and a dashboard form over ``max_body_bytes`` — with a Content-Length or chunked — are
    refused with 413 and the same JSON error body as every other error, naming the limit."""
    big = {**JOB, "data": service["data"], "hyperparams": {"x": "a" * (2 << 20)}}
    response = service["client"].post("/api/v1/jobs", headers=auth(service, "alice"), json=big)
    assert response.status_code == 413 and response.headers["content-type"] == "application/json"
    assert "limit of 1048576 bytes (max_body_bytes)" in response.json()["detail"]
    form = service["client"].post("/login", data={"token": "a" * (2 << 20)})
    assert form.status_code == 413 and form.json()["detail"] == response.json()["detail"]
    chunked = service["client"].post(  # no Content-Length: the limit is met while the body streams in (issue 53)
        "/api/v1/jobs", headers={**auth(service, "alice"), "Content-Type": "application/json"},
        content=iter([json.dumps(big).encode()[i:i + 65536] for i in range(0, len(json.dumps(big)), 65536)]))
    assert chunked.status_code == 413 and chunked.json()["detail"] == response.json()["detail"]


def test_auth_off_is_the_local_admin_and_refused_off_loopback(home: Path, cancer_csv: Path) -> None:
    with pytest.raises(TwinkleError, match="without auth"):
        ServerConfig(home=str(home), host="0.0.0.0", auth=False)
    ServerConfig(home=str(home), host="0.0.0.0", auth=True)  # allowed: tokens are required
    client = TestClient(create_app(ServerConfig(home=str(home), auth=False)))
    me = client.get("/api/v1/me").json()
    assert me["admin"] is True
    job = client.post("/api/v1/jobs", json={**JOB, "data": str(home / "datasets" / "cancer.csv")})
    assert job.status_code == 201 and job.json()["user"] == me["name"]
    assert client.get("/").status_code == 200  # the dashboard needs no login either


def test_algorithms_server_logs_metrics_and_events_endpoints(service: dict) -> None:
    client, alice = service["client"], auth(service, "alice")
    names = [a["name"] for a in client.get("/api/v1/algorithms", headers=alice).json()]
    assert "tabular-mlp" in names
    form = client.get("/api/v1/algorithms/tabular-mlp", headers=alice).json()
    params = {p["name"]: p for p in form["hyperparameters"]}
    assert params["optimizer"]["choices"] == ["adamw", "adam", "sgd"] and "max_epochs" in params
    assert client.get("/api/v1/algorithms/nope", headers=alice).status_code == 404  # an unknown name: not found
    pattern = client.get("/api/v1/algorithms/timm%2F%2A", headers=alice)  # a listed name holding '/'
    listed = {a["name"] for a in client.get("/api/v1/algorithms", headers=alice).json()}
    assert ("timm/*" in listed) == (pattern.status_code == 200)
    info = client.get("/api/v1/server", headers=alice).json()
    assert info["auth"] is True and info["jobs"]["queued"] == 0 and info["max_queued_per_user"] == 5
    job = submit(service, "alice")
    bob, root = auth(service, "bob"), auth(service, "root")
    counted = {name: client.get("/api/v1/server", headers=h).json()["jobs"]["queued"]  # per user (issue 53)
               for name, h in (("alice", alice), ("bob", bob), ("root", root))}
    assert counted == {"alice": 1, "bob": 0, "root": 1}  # bob sees none of alice's; an admin sees every user's
    assert client.get(f"/api/v1/jobs/{job['id']}/logs", headers=alice).json() == {"text": "", "offset": 0, "next_offset": 0}
    assert client.get(f"/api/v1/jobs/{job['id']}/metrics", headers=alice).json() == {"run": None, "rows": []}
    client.post(f"/api/v1/jobs/{job['id']}/cancel", headers=alice)
    with client.stream("GET", f"/api/v1/jobs/{job['id']}/events", headers=alice) as stream:
        text = "".join(stream.iter_text())
    assert "event: state" in text and "event: end" in text and '"cancelled"' in text
    ids = [line.split(": ", 1)[1] for line in text.splitlines() if line.startswith("id: ")]
    with client.stream("GET", f"/api/v1/jobs/{job['id']}/events", headers={**alice, "Last-Event-ID": ids[0]}) as stream:
        resumed = "".join(stream.iter_text())
    assert resumed.count("event: state") == text.count("event: state") - 1  # continues after the given event
    assert client.get("/openapi.json").json()["paths"]["/api/v1/jobs"]["post"]


def test_the_dashboard_logs_in_with_a_cookie_and_its_forms_need_the_csrf_token(service: dict) -> None:
    client = service["client"]
    assert client.get("/", follow_redirects=False).headers["location"] == "/login"
    form = client.get("/login")
    for name, value in (("x-frame-options", "DENY"), ("x-content-type-options", "nosniff")):
        assert form.headers[name] == value  # on every page (and every API answer)
    assert "frame-ancestors 'none'" in form.headers["content-security-policy"]
    assert "script-src 'self';" in form.headers["content-security-policy"]
    login_csrf = form.text.split('name="csrf" value="')[1].split('"')[0]
    token = service["tokens"]["alice"]
    # the login form has a CSRF token of its own: a post without it, or with another, logs nobody in
    assert client.post("/login", data={"token": token}, follow_redirects=False).status_code == 403
    assert client.post("/login", data={"token": token, "csrf": "forged"}, follow_redirects=False).status_code == 403
    fresh = client.get("/login").text.split('name="csrf" value="')[1].split('"')[0]
    assert fresh != login_csrf
    assert client.post("/login", data={"token": "tw_wrong", "csrf": fresh}).status_code == 401
    fresh = client.get("/login").text.split('name="csrf" value="')[1].split('"')[0]
    response = client.post("/login", data={"token": token, "csrf": fresh}, follow_redirects=False)
    assert response.status_code == 303
    cookie = response.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie
    assert client.get("/api/v1/me").headers["x-content-type-options"] == "nosniff"
    page = client.get("/submit?algorithm=tabular-mlp").text
    assert 'name="hp_max_epochs"' in page and 'name="hp_optimizer"' in page
    csrf = page.split('name="csrf" value="')[1].split('"')[0]
    form = {"algorithm": "tabular-mlp", "data": service["data"], "hp_max_epochs": "2"}
    assert client.post("/submit", data=form).status_code == 403  # no CSRF token
    assert client.post("/submit", data={**form, "csrf": "forged"}).status_code == 403
    created = client.post("/submit", data={**form, "csrf": csrf}, follow_redirects=False)
    assert created.status_code == 303
    job_id = created.headers["location"].rsplit("/", 1)[1]
    page = client.get(f"/jobs/{job_id}").text
    assert "sse-connect" in page and 'id="cancel"' in page and "tabular-mlp" in page
    bad = client.post("/submit", data={**form, "csrf": csrf, "hp_max_epochs": "many"})
    assert bad.status_code == 400 and "max_epochs" in bad.text
    # the cookie reads the API but cannot write through it (only the CSRF-checked forms can)
    assert client.get("/api/v1/me").json()["name"] == "alice"
    assert client.post(f"/api/v1/jobs/{job_id}/cancel").status_code == 403
    assert client.post(f"/jobs/{job_id}/cancel", data={}).status_code == 403
    assert client.post(f"/jobs/{job_id}/cancel", data={"csrf": csrf}, follow_redirects=False).status_code == 303
    assert client.get(f"/api/v1/jobs/{job_id}").json()["state"] == "cancelled"
    for page_path in ("/", "/runs", "/?state=cancelled", "/static/vendor/htmx.min.js", "/static/app.js"):
        assert client.get(page_path).status_code == 200, page_path
    other = submit(service, "bob")
    assert client.get(f"/jobs/{other['id']}").status_code == 404
    client.post("/logout", data={"csrf": csrf})
    assert client.get("/", follow_redirects=False).status_code == 303


# ---------------------------------------------------------------------- the queue itself
def test_claims_follow_priority_then_age_and_respect_the_running_limit(tmp_path: Path) -> None:
    queue = JobQueue(str(tmp_path / "q.sqlite"), max_running_per_user=1)
    low = queue.submit("alice", {"n": 1}, priority=0)
    high = queue.submit("alice", {"n": 2}, priority=9)
    other = queue.submit("bob", {"n": 3}, priority=0)
    assert queue.claim("w1", 30).id == high.id
    assert queue.claim("w2", 30).id == other.id  # alice is at her limit: bob's job goes first
    assert queue.claim("w3", 30) is None
    waiting = queue.get(low.id)
    assert "alice has 1 job(s) running, the per-user limit is 1" in queue.pending_reason(waiting, workers=3)
    assert queue.release(high.id, "w1", "finished", "done")
    assert queue.claim("w3", 30).id == low.id


def test_an_expired_lease_requeues_the_job_and_the_old_worker_changes_nothing(tmp_path: Path) -> None:
    queue = JobQueue(str(tmp_path / "q.sqlite"))
    job = queue.submit("alice", {"n": 1})
    assert queue.claim("w1", 0.2).id == job.id
    time.sleep(0.3)
    again = queue.claim("w2", 30)  # w1 missed its lease: the job is w2's now
    assert again.id == job.id and again.attempts == 2 and again.restarts == 1
    assert not queue.heartbeat(job.id, "w1", 30)  # w1 learns it lost the job
    assert not queue.release(job.id, "w1", "finished", "late")  # and cannot end it
    assert queue.release(job.id, "w2", "finished", "done")
    states = [t["state"] for t in queue.get(job.id).transitions]
    assert states == ["queued", "running", "queued", "running", "finished"]
    assert "stopped renewing its lease" in queue.get(job.id).transitions[2]["reason"]


def test_concurrent_workers_never_claim_a_job_twice(tmp_path: Path) -> None:
    path = str(tmp_path / "q.sqlite")
    queue = JobQueue(path)
    for n in range(40):
        queue.submit("alice" if n % 2 else "bob", {"n": n})
    claimed: list[str] = []

    def worker(name: str) -> None:
        mine = JobQueue(path)
        while (job := mine.claim(name, 30)) is not None:
            claimed.append(job.id)
            mine.release(job.id, name, "finished", "done")

    threads = [threading.Thread(target=worker, args=(f"w{i}",)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(claimed) == 40 and len(set(claimed)) == 40
    assert queue.counts()["finished"] == 40


def test_rows_read_again_are_not_parsed_again_yet_every_change_shows(tmp_path: Path) -> None:
    """The queue keeps the parsed rows it has read (listing pages of jobs was a quarter of the API's time): a row
    read again in the same values is not parsed again, a change to any column — also those that leave
    ``updated`` alone (the process id, the run) — is read anew, and what one caller changes on its row (its
    ``pending_reason``) no other caller sees."""
    queue = JobQueue(str(tmp_path / "q.sqlite"))
    job = queue.submit("alice", {"n": 1, "nested": {"lr": 0.1}})
    assert queue.claim("w1", 30).id == job.id
    first = queue.list()[0]
    parsed = dict(queue._parsed)
    assert queue.list()[0] == first and queue._parsed == parsed  # the same values: nothing parsed again
    queue.set_process(job.id, "w1", 4242, run="twinkle://alice/default/run1")
    again = queue.get(job.id)
    assert (again.pid, again.run) == (4242, "twinkle://alice/default/run1")
    first.pending_reason = "a caller's own view"
    assert queue.list()[0].pending_reason is None and queue.list()[0].request == {"n": 1, "nested": {"lr": 0.1}}


def test_why_a_job_waits_is_read_once_per_change_of_the_queue_whoever_changes_it(tmp_path: Path) -> None:
    """The queue's claim order behind "why it waits" is kept until the queue changes: a change made through another
    connection (another API process) or through this one (a claim) shows in the very next answer."""
    queue, other = JobQueue(str(tmp_path / "q.sqlite")), JobQueue(str(tmp_path / "q.sqlite"))
    first, second = queue.submit("alice", {"n": 1}), queue.submit("alice", {"n": 2})
    assert queue.pending_reason(queue.get(second.id), workers=1) == "1 job(s) are ahead of it"
    kept = queue._read.claim_order
    assert queue.pending_reason(queue.get(second.id), workers=1) == "1 job(s) are ahead of it"
    assert queue._read.claim_order is kept  # nothing changed: not read again
    other.submit("bob", {"n": 3}, priority=5)  # another connection jumps the queue
    assert queue.pending_reason(queue.get(second.id), workers=1) == "2 job(s) are ahead of it"
    assert queue.claim("w1", 30).user == "bob"  # this connection's own change: bob's job runs, alice's first waits
    assert queue.pending_reason(queue.get(second.id), workers=1) == "all 1 worker(s) are busy; 1 job(s) are ahead of it"
    assert queue.get(first.id).state == "queued"


def test_a_server_restart_requeues_what_was_running(tmp_path: Path) -> None:
    queue = JobQueue(str(tmp_path / "q.sqlite"))
    running, waiting = queue.submit("alice", {"n": 1}), queue.submit("alice", {"n": 2})
    queue.claim("w1", 30)
    orphans = queue.recover("the server restarted")
    assert [o.id for o in orphans] == [running.id]
    assert queue.get(running.id).state == "queued" and queue.get(waiting.id).state == "queued"
    assert queue.get(running.id).restarts == 0  # not a crash of the job


def test_a_job_that_keeps_killing_its_worker_fails_and_a_cancel_asked_meanwhile_holds(tmp_path: Path) -> None:
    queue = JobQueue(str(tmp_path / "q.sqlite"))
    job = queue.submit("alice", {"max_restarts": 1})
    queue.claim("w1", 0.05)
    time.sleep(0.1)
    assert queue.claim("w2", 0.05).restarts == 1  # the first death: resumed
    time.sleep(0.1)
    assert queue.claim("w3", 30) is None  # the second: max_restarts=1 reached
    ended = queue.get(job.id)
    assert ended.state == "failed" and "gave up after 1 restart(s)" in ended.reason
    other = queue.submit("alice", {})
    queue.claim("w4", 0.05)
    queue.request_cancel(other.id, "alice")  # asked while running; then its worker dies
    time.sleep(0.1)
    assert queue.claim("w5", 30) is None
    assert queue.get(other.id).state == "cancelled" and "cancelled by alice" in queue.get(other.id).reason


def test_uploads_are_the_users_own_data_capped_and_unpacked_safely(home: Path, cancer_csv: Path, tmp_path: Path) -> None:
    import io
    import tarfile
    import zipfile

    config = ServerConfig(home=str(home), max_upload_bytes=200_000)
    accounts = Accounts(config.db_path)
    alice = {"Authorization": f"Bearer {accounts.add_user('alice')}"}
    bob = {"Authorization": f"Bearer {accounts.add_user('bob')}"}
    client = TestClient(create_app(config))
    put = client.put("/api/v1/uploads/cancer.csv", headers=alice, content=cancer_csv.read_bytes())
    assert put.status_code == 201, put.text
    data = put.json()["data"]
    assert data == str(home.resolve() / "uploads" / "alice" / "cancer.csv") and put.json()["bytes"] > 100_000
    assert [u["name"] for u in client.get("/api/v1/uploads", headers=alice).json()] == ["cancer.csv"]
    assert client.get("/api/v1/uploads", headers=bob).json() == []
    job = client.post("/api/v1/jobs", headers=alice, json={**JOB, "data": data})
    assert job.status_code == 201 and job.json()["request"]["data"] == data
    theirs = client.post("/api/v1/jobs", headers=bob, json={**JOB, "data": data})
    assert theirs.status_code == 403 and "not under a data root" in theirs.text  # alice's uploads are hers alone
    # an archive becomes a folder of its stem
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("digits/0/a.txt", "x")
        archive.writestr("digits/1/b.txt", "y")
    folder = client.put("/api/v1/uploads/set.zip", headers=alice, content=buffer.getvalue()).json()["data"]
    assert sorted(p.name for p in Path(folder, "digits").iterdir()) == ["0", "1"]
    # refused: traversal, links, too large (declared or streamed), an archive that unpacks too large, bad names
    evil = io.BytesIO()
    with zipfile.ZipFile(evil, "w") as archive:
        archive.writestr("../../escaped.txt", "x")
    assert client.put("/api/v1/uploads/evil.zip", headers=alice, content=evil.getvalue()).status_code == 400
    linked = io.BytesIO()
    with tarfile.open(fileobj=linked, mode="w") as archive:
        info = tarfile.TarInfo("link")
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
        archive.addfile(info)
    assert client.put("/api/v1/uploads/linked.tar", headers=alice, content=linked.getvalue()).status_code == 400
    assert not list(home.rglob("escaped.txt")) and not (home / "uploads" / "alice" / "linked").exists()
    too_big = client.put("/api/v1/uploads/big.bin", headers=alice, content=b"x" * 300_000)
    assert too_big.status_code == 413 and "limit of" in too_big.json()["detail"]
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("zeros.bin", b"\0" * 5_000_000)
    assert len(bomb.getvalue()) < 200_000
    assert client.put("/api/v1/uploads/bomb.zip", headers=alice, content=bomb.getvalue()).status_code == 413
    assert client.put("/api/v1/uploads/..", headers=alice, content=b"x").status_code in (400, 404, 405)
    assert client.put("/api/v1/uploads/a%2fb", headers=alice, content=b"x").status_code in (400, 404)
    assert not [p for p in (home / "uploads" / "alice").iterdir() if p.name.startswith(".")]  # no leftovers
    assert client.delete("/api/v1/uploads/set", headers=alice).status_code == 204
    assert client.delete("/api/v1/uploads/set", headers=alice).status_code == 404
    gone = client.post("/api/v1/jobs", headers=alice, json={**JOB, "data": folder})  # a deleted upload: not found
    assert gone.status_code == 404 and "is not among your uploads" in gone.json()["detail"]
    actions = [a["action"] for a in accounts.audit_log()]
    assert actions.count("upload") == 2 and "delete upload" in actions


@pytest.mark.parametrize("body, field", [
    ('"wall_clock_limit": NaN', ["body", "wall_clock_limit"]),
    ('"priority": Infinity', ["body", "priority"]),
    ('"budget": {"max_cost": -Infinity}', ["body", "budget", "max_cost"]),
    ('"hyperparams": {"lr": NaN}', ["body", "hyperparams", "lr"]),
    ('"hyperparams": {"lr": 1e999}', ["body", "hyperparams", "lr"]),
])
def test_non_finite_numbers_are_refused_when_parsed_and_nothing_is_stored(service: dict, body: str,
                                                                          field: list) -> None:
    """Proves NaN, ±Infinity and numbers beyond a float (which Python's json reads but JSON cannot hold) are
    answered 422 naming the field — not 500, not stored — and that listing, filtering and the dashboard keep
    answering afterwards."""
    client = service["client"]
    raw = '{"algorithm": "tabular-mlp", "data": %s, %s}' % (json.dumps(service["data"]), body)
    response = client.post("/api/v1/jobs", content=raw, headers={**auth(service, "alice"),
                                                                  "Content-Type": "application/json"})
    assert response.status_code == 422, response.text
    errors = response.json()["detail"]
    assert [e["loc"] for e in errors] == [field] and errors[0]["type"] == "finite_number"
    assert "finite number" in errors[0]["msg"]
    assert client.get("/api/v1/jobs", headers=auth(service, "alice")).json() == []
    listed = client.get("/api/v1/jobs?algorithm=tabular-mlp", headers=auth(service, "root"))
    assert listed.status_code == 200 and listed.json() == []
    assert client.get("/?algorithm=tabular-mlp", headers=auth(service, "root")).status_code in (200, 303)


@pytest.mark.parametrize("hyperparams, named", [
    ({"lr": -0.1}, "'lr' = -0.1 is out of range"),
    ({"lr": "fast"}, "'lr' expects"),
    ({"dropout": 1.5}, "'dropout' = 1.5 is out of range"),
    ({"optimizer": "bogus"}, "'optimizer' expects"),
    ({"weight_decay": "nan"}, "'weight_decay' = 'nan' is out of range"),
    ({"val_fraction": 2.0}, "'val_fraction'"),
])
def test_submit_checks_every_value_as_the_trainer_does_and_creates_no_job(service: dict, hyperparams: dict,
                                                                          named: str) -> None:
    """Proves submit refuses with 400 every bad algorithm, optimizer and data-processor value that ``Trainer(...)``
    refuses (the same message, naming the key and value), and that no job is created."""
    from twinkle_core import Trainer
    from twinkle_core.errors import HyperparameterError

    with pytest.raises(HyperparameterError) as raised:
        Trainer("tabular-mlp", hyperparams=hyperparams, home=str(service["home"]), verbose=False)
    assert named in str(raised.value)
    response = service["client"].post("/api/v1/jobs", headers=auth(service, "alice"),
                                      json={**JOB, "data": service["data"], "hyperparams": hyperparams})
    assert response.status_code == 400 and response.json() == {"detail": str(raised.value)}
    assert service["client"].get("/api/v1/jobs", headers=auth(service, "alice")).json() == []


def test_a_worker_seen_dying_requeues_its_job_at_once_and_fails_it_past_max_restarts(tmp_path: Path) -> None:
    """Proves the death path: a job whose worker the server saw die is queued again at once — its lease (an hour
    here) never runs out — with a reason saying so, counted as a restart; past ``max_restarts`` it fails; the
    dead worker leaves the workers table and other workers' jobs are untouched."""
    queue = JobQueue(str(tmp_path / "db" / "jobs.db"))
    mine = queue.submit("alice", {**JOB, "data": "x.csv", "max_restarts": 1})
    other = queue.submit("alice", {**JOB, "data": "y.csv"})
    assert queue.claim("w1-100-1", 3600).id == mine.id and queue.claim("w2-100-2", 3600).id == other.id
    queue.worker_beat("w1-100-1", mine.id, pid=4242)
    assert [j.id for j in queue.held_by("w1-100-1")] == [mine.id]
    queue.worker_died("w1-100-1", "killed by SIGKILL")
    again = queue.get(mine.id)
    assert again.state == "queued" and again.restarts == 1 and again.worker is None
    assert again.reason.startswith("worker w1-100-1 died (killed by SIGKILL); the server requeued the job at once")
    assert queue.get(other.id).state == "running"
    assert "w1-100-1" not in {w["id"] for w in queue.workers(3600)}
    assert queue.claim("w1-100-3", 3600).id == mine.id  # its replacement, under a name of its own
    queue.worker_died("w1-100-3", "exit status 1")
    failed = queue.get(mine.id)
    assert failed.state == "failed" and "gave up after 1 restart(s)" in failed.reason


def test_the_app_opens_its_store_once_and_streams_reuse_it(service: dict, monkeypatch) -> None:
    """Proves #24's "fast reads": the run store, the job table and the accounts are opened once per app — no
    request and no event stream opens (and runs the schema of) a database again; each thread keeps its own
    SQLite connection."""
    import twinkle_core.store.sqlite as sqlite_module

    client, alice = service["client"], auth(service, "alice")
    job = submit(service, "alice")
    opened: list[str] = []
    original = sqlite_module.Database.__init__
    monkeypatch.setattr(sqlite_module.Database, "__init__", lambda self, *a, **k: (opened.append(a[0]),
                                                                                   original(self, *a, **k))[1])
    for _ in range(3):
        assert client.get("/api/v1/jobs", headers=alice).status_code == 200
        assert client.get(f"/api/v1/jobs/{job['id']}", headers=alice).status_code == 200
        assert client.get("/api/v1/runs", headers=alice).status_code == 200
        assert client.get("/api/v1/server", headers=alice).status_code == 200
    client.post(f"/api/v1/jobs/{job['id']}/cancel", headers=alice)
    with client.stream("GET", f"/api/v1/jobs/{job['id']}/events", headers=alice) as stream:
        assert "event: end" in "".join(stream.iter_text())
    assert opened == []


def test_a_runs_page_shows_its_evaluations(service: dict, home: Path, tmp_path: Path) -> None:
    """A run's dashboard page lists its evaluations — figures and plots (the confusion matrix, served from the
    run's files) — and says how to make one when there is none."""
    import pandas as pd

    from twinkle_core import Trainer

    client = service["client"]
    trainer = Trainer("tabular-mlp", hyperparams={"max_epochs": 2}, home=str(home), user="alice", project="p",
                      verbose=False, progress_bar=False)
    result = trainer.fit(service["data"])
    form = client.get("/login").text.split('name="csrf" value="')[1].split('"')[0]
    client.post("/login", data={"token": service["tokens"]["alice"], "csrf": form})
    page = client.get("/runs/alice/p/run1").text
    assert 'id="evaluations"' in page and "None yet" in page
    pd.read_csv(service["data"]).head(80).to_csv(tmp_path / "test.csv", index=False)
    evaluation = trainer.evaluate(str(tmp_path / "test.csv"))
    page = client.get("/runs/alice/p/run1").text
    assert f"1: 80 samples of <code>{tmp_path / 'test.csv'}</code>" in page and "macro_f1" in page
    image = "evaluations/1/confusion_matrix.png"
    assert f'src="/api/v1/runs/{result.run_uri.removeprefix("twinkle://")}/files/{image}"' in page
    served = client.get(f"/api/v1/runs/alice/p/run1/files/{image}")
    assert served.status_code == 200 and served.content[:4] == b"\x89PNG" and evaluation.number == 1


def test_a_job_continues_only_a_run_of_its_users_and_a_refusal_queues_nothing(service: dict, home: Path) -> None:
    """``continues``: alice's job may start from her run; bob's request naming
    her run is 403 and a run that does not exist 404, each naming ``continues.run`` — and neither queues a job."""
    from twinkle_core import Trainer

    run = Trainer("tabular-mlp", hyperparams={"max_epochs": 1, "progress_bar": False}, user="alice",
                  home=str(home), verbose=False).fit(service["data"]).run_uri
    client = service["client"]
    body = {"algorithm": "tabular-mlp", "data": service["data"], "hyperparams": {"max_epochs": 1},
            "continues": {"run": run, "mode": "finetune"}}
    refused = client.post("/api/v1/jobs", headers=auth(service, "bob"), json=body)
    assert refused.status_code == 403 and "continues.run" in refused.json()["detail"], refused.text
    gone = client.post("/api/v1/jobs", headers=auth(service, "alice"),
                       json={**body, "continues": {"run": run.replace("run1", "run7")}})
    assert gone.status_code == 404 and "run7" in gone.json()["detail"], gone.text
    assert client.get("/api/v1/jobs", headers=auth(service, "bob")).json() == []
    assert client.get("/api/v1/jobs", headers=auth(service, "alice")).json() == []
    accepted = client.post("/api/v1/jobs", headers=auth(service, "alice"), json=body)
    assert accepted.status_code == 201, accepted.text
    assert accepted.json()["request"]["continues"] == {"run": run, "mode": "finetune"}
