"""Data for Twinkle: the :class:`~twinkle_core.data.spec.DataSpec` an algorithm builds itself from."""
