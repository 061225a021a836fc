"""GetRecords records read unparsed (``skip_record_parsing``) carry the same payload and arrival
as botocore's parsed ones, so a record lands in the same range whichever client read it."""

from __future__ import annotations

import base64
from datetime import datetime, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_kinesis_doris.core.kinesis.shard_pages import (
    arrival_ms,
    epoch_seconds_ms,
    record_arrival_ms,
    record_data,
)

# Epoch seconds up to year 2100, with whatever fraction a float holds: halves of a microsecond
# and of a millisecond included, where the two roundings could part.
epoch_seconds = st.one_of(
    st.floats(min_value=0, max_value=4.1e9, allow_nan=False, allow_infinity=False),
    st.integers(min_value=0, max_value=4_100_000_000_000).map(lambda ms: ms / 1000),
    st.integers(min_value=0, max_value=4_100_000_000_000_000).map(lambda us: us / 1_000_000),
    st.integers(min_value=0, max_value=4_100_000_000_000).map(lambda ms: ms / 1000 + 0.0005),
    st.integers(min_value=0, max_value=4_100_000_000_000_000).map(lambda us: us / 1_000_000 + 0.0000005),
)


@given(epoch_seconds)
@settings(max_examples=2000)
def test_epoch_seconds_give_the_arrival_botocores_datetime_gives(seconds: float) -> None:
    assert epoch_seconds_ms(seconds) == arrival_ms(datetime.fromtimestamp(seconds, tz=timezone.utc))


@given(st.binary(max_size=300), epoch_seconds)
def test_a_wire_record_and_a_parsed_record_read_the_same(data: bytes, seconds: float) -> None:
    wire = {"Data": base64.b64encode(data).decode("ascii"), "ApproximateArrivalTimestamp": seconds}
    parsed = {"Data": data, "ApproximateArrivalTimestamp": datetime.fromtimestamp(seconds, tz=timezone.utc)}
    assert record_data(wire) == record_data(parsed) == data
    assert record_arrival_ms(wire) == record_arrival_ms(parsed)
