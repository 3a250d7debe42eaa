"""twinkle-timeseries's journey from its wheel: list, train kronos-tiny on packaged daily bars, forecast, continue.

Kronos has no exporter yet (it says so by name), so the journey forecasts with the trained model instead.
"""

from __future__ import annotations

import sys
from pathlib import Path

from common import continued, start


def main(work: Path) -> None:
    """Run the journey in ``work`` (its data and run store)."""
    start("timeseries", "twinkle_timeseries")
    import pandas as pd
    from bokeh_sampledata import stocks

    from twinkle_core import Trainer
    from twinkle_core.errors import TwinkleError

    bars = work / "bars"
    bars.mkdir()
    for symbol in ("AAPL", "IBM"):
        pd.DataFrame(getattr(stocks, symbol)).to_csv(bars / f"{symbol}.csv", index=False)
    windows = {"lookback_window": 30, "pred_len": 8, "val_start": "2009-01-01", "test_start": "2011-01-01", "stride": 8}
    trainer = Trainer("kronos-tiny", hyperparams={**windows, "max_epochs": 2, "tokenizer_epochs": 1},
                      home=str(work / "home"), progress_bar=False)
    result = trainer.fit(data=str(bars))
    assert result.status == "finished", result.status
    try:
        trainer.export(format="onnx")
        raise AssertionError("Kronos exported, but the journey expects its named refusal")
    except TwinkleError as err:
        print(f"export refused by name: {err}")
    forecast = trainer.algorithm.predict(pd.read_csv(bars / "AAPL.csv").tail(60), pred_len=8, seed=0)
    assert len(forecast) == 8, forecast
    child = continued(result.run_uri, work, max_epochs=3)
    print(f"trained {result.run_uri}, forecast 8 bars, continued as {child}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
