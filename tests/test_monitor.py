"""trainer.monitor: computed metrics, the alert-rule grammar, webhooks and stopping."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pandas as pd
import pytest

from twinkle_core import RunStore, Trainer
from twinkle_core.ops.rules import AlertRuleError, parse_rule


@pytest.mark.parametrize(
    ("text", "kind", "unit", "threshold", "window"),
    [
        ("stale > 3epochs", "stale", "epoch", 3, 0),
        ("stale > 100 steps", "stale", "step", 100, 0),
        ("> 2.5", "compare", "epoch", 2.5, 0),
        ("<1e-3", "compare", "epoch", 1e-3, 0),
        ("NaN", "nan", "epoch", 0, 0),
        ("increase > 20% over 2 epochs", "increase", "epoch", 20, 2),
    ],
)
def test_grammar(text, kind, unit, threshold, window) -> None:
    rule = parse_rule("loss", text)
    assert (rule.kind, rule.unit, rule.threshold, rule.window) == (kind, unit, threshold, window)


@pytest.mark.parametrize("text", ["stale 3 epochs", "> abc", "increase > 20 over 2 epochs", "sometimes"])
def test_parse_error_names_the_rule(text) -> None:
    with pytest.raises(AlertRuleError, match=f"alert rule for 'loss' cannot be parsed: {text!r}"):
        parse_rule("loss", text)


def test_rules_fire_once_and_rearm() -> None:
    above = parse_rule("loss", "> 1")
    assert [above.observe(v, "val_loss") is not None for v in (0.5, 2, 3, 0.5, 2)] == [False, True, False, False, True]
    stale = parse_rule("val_accuracy", "stale > 2 epochs")
    fired = [stale.observe(v, "val_accuracy") for v in (0.5, 0.6, 0.6, 0.55, 0.6, 0.7)]
    assert [f is not None for f in fired] == [False, False, False, False, True, False]
    assert "no improvement on 0.6 for 3 epochs" in fired[4]
    rise = parse_rule("loss", "increase > 50% over 2 epochs")
    assert [rise.observe(v, "val_loss") is not None for v in (1.0, 0.8, 1.6, 1.0)] == [False, False, True, False]
    nan = parse_rule("loss", "nan")
    assert nan.observe(float("nan"), "train_loss") is not None


class Hook(BaseHTTPRequestHandler):
    received: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Hook.received.append(json.loads(body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def webhook():
    server = HTTPServer(("127.0.0.1", 0), Hook)
    Hook.received = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/alerts", Hook.received
    server.shutdown()


def test_flat_loss_fires_and_improving_loss_does_not(twinkle_home, cancer_csv, webhook) -> None:
    url, received = webhook
    rules = {"loss": "stale > 3epochs"}
    flat = Trainer("tabular-mlp", hyperparams={"lr": 1e-30, "max_epochs": 7}, verbose=False)
    flat.monitor(metrics=["loss", "accuracy", "grad_norm"], alert_rules=rules, webhook=url)
    result = flat.fit(str(cancer_csv))
    (alert,) = result.alerts
    assert alert["metric"] == "val_loss" and alert["rule"] == "stale > 3epochs" and alert["epoch"] == 4
    assert alert["webhook_delivered"] is True
    assert received and received[0]["run"] == result.run_uri and received[0]["metric"] == "val_loss"
    assert RunStore().get(result.run_uri).alerts[0]["message"] == alert["message"]
    assert result.status == "finished"
    metrics = pd.read_csv(Path(result.run_dir) / "logs" / "metrics.csv")
    assert metrics["grad_norm_step"].dropna().gt(0).all()

    improving = Trainer("tabular-mlp", hyperparams={"lr": 3e-3, "max_epochs": 7}, verbose=False)
    improving.monitor(metrics=["loss"], alert_rules=rules, webhook=url)
    assert improving.fit(str(cancer_csv)).alerts == []
    assert len(received) == 1


def test_stop_action_checkpoints_then_stops(twinkle_home, cancer_csv) -> None:
    trainer = Trainer("tabular-mlp", hyperparams={"lr": 1e-30, "max_epochs": 20}, verbose=False)
    trainer.monitor(alert_rules={"loss": {"rule": "stale > 1 epochs", "action": "stop"}})
    result = trainer.fit(str(cancer_csv))
    assert result.status == "stopped" and "stale > 1 epochs" in result.stop_reason
    assert result.alerts[0]["action"] == "stop" and Path(result.alerts[0]["checkpoint"]).exists()
    metrics = pd.read_csv(Path(result.run_dir) / "logs" / "metrics.csv")
    assert metrics["epoch"].max() == 2  # epochs 0, 1, 2: stale for 2 > 1
    resumed = Trainer.from_checkpoint(result.run_uri, mode="resume", hyperparams={"max_epochs": 4}).fit()
    assert resumed.status == "finished"


def test_bad_rule_fails_before_training(twinkle_home) -> None:
    trainer = Trainer("tabular-mlp", verbose=False)
    with pytest.raises(AlertRuleError, match="'loss'"):
        trainer.monitor(alert_rules={"loss": "stale > three epochs"})
    with pytest.raises(AlertRuleError, match="must be 'log' or 'stop'"):
        trainer.monitor(alert_rules={"loss": "nan"}, action="panic")


def test_unknown_metric_is_reported(twinkle_home, cancer_csv) -> None:
    trainer = Trainer("tabular-mlp", hyperparams={"max_epochs": 2}, verbose=False)
    trainer.monitor(alert_rules={"f1": "< 0.5"})
    (alert,) = trainer.fit(str(cancer_csv)).alerts
    assert alert["kind"] == "missing_metric" and "metric 'f1' is not logged" in alert["message"]


def test_an_alert_is_typed_and_stored_as_the_flat_json_readers_know() -> None:
    """``Alert`` types kind and action (text given is converted, an unknown kind is refused), stores only the
    fields it has plus its details, flat, and reads back from that JSON; a missing metric never stops training."""
    from twinkle_core.ops.alerts import Alert, AlertAction, AlertKind

    stop = Alert("budget", "stop", "budget max_cost reached", rule="max_cost reached", step=7,
                 details={"limit": "max_cost", "fraction": 1.02})
    stored = stop.to_dict()
    assert stored == {"kind": "budget", "action": "stop", "message": "budget max_cost reached",
                      "rule": "max_cost reached", "step": 7, "limit": "max_cost", "fraction": 1.02}
    assert json.loads(json.dumps(stored)) == stored and Alert.from_dict(stored) == stop
    assert stop.kind is AlertKind.BUDGET and stop.stops_training
    assert not Alert(AlertKind.MISSING_METRIC, AlertAction.STOP, "metric 'f1' is not logged").stops_training
    with pytest.raises(ValueError, match="'loud'"):
        Alert("loud", "log", "?")
