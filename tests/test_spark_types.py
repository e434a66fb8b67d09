"""Temporal and decimal columns through the sink: Arrow keeps their types, JSON writes a documented text."""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Iterator
from typing import Any
from zoneinfo import ZoneInfo

import affinity
import pyarrow as pa
import pytest
from affinity.spark.encoding import decode_arrow, decode_json
from affinity.spark.envelope import Envelope, Kind, decode
from affinity.testing import loopback_channel
from spark_support import spark_session, wait_for

pytestmark = pytest.mark.spark

ROWS = 300
#: A session time zone with a half-hour offset, so a body written in local time instead of UTC shows.
SESSION_ZONE = "Asia/Kolkata"
BASE_MICROS = 1_767_323_045_000_000  # 2026-01-02T03:04:05Z
STEP_MICROS = 1_000_003
FIRST_DAY = dt.date(2026, 1, 1)
STREAM_ID = 12


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = spark_session()
    previous = session.conf.get("spark.sql.session.timeZone")
    session.conf.set("spark.sql.session.timeZone", SESSION_ZONE)
    yield session
    session.conf.set("spark.sql.session.timeZone", previous)


@pytest.fixture
def subscribed(client: affinity.Client) -> Iterator[tuple[str, affinity.Subscription]]:
    channel = loopback_channel()
    with client.add_subscription(channel, STREAM_ID) as sub:
        yield channel, sub


def typed_frame(spark: Any) -> Any:
    return spark.range(0, ROWS, numPartitions=2).selectExpr(
        "id",
        f"timestamp_micros(id * {STEP_MICROS} + {BASE_MICROS}) AS ts",
        f"cast(timestamp_micros(id * {STEP_MICROS} + {BASE_MICROS}) AS timestamp_ntz) AS local_ts",
        f"date_add(date '{FIRST_DAY.isoformat()}', cast(id AS int)) AS day",
        "cast(id * 0.125 AS decimal(12, 3)) AS amount",
    )


def expected_instant(row_id: int) -> dt.datetime:
    return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=row_id * STEP_MICROS + BASE_MICROS)


def write_and_collect(spark: Any, channel: str, sub: affinity.Subscription, fmt: str) -> list[bytes]:
    writer = typed_frame(spark).write.format("affinity").option("channel", channel)
    writer.option("streamId", str(STREAM_ID)).option("value", fmt).option("maxBatchRows", "64").mode("append").save()
    got: list[tuple[Envelope, bytes]] = []

    def poll() -> bool:
        for raw in sub.poll_batch(1000):
            envelope, body = decode(raw)
            got.append((envelope, bytes(body)))
        return any(e.kind is Kind.COMMIT for e, _ in got)

    wait_for(poll, 60.0, "the sink's messages and commit")
    return [body for e, body in got if e.kind is Kind.DATA]


def test_arrow_value_keeps_timestamp_date_and_decimal_columns(
    spark: Any, subscribed: tuple[str, affinity.Subscription]
) -> None:
    channel, sub = subscribed
    table = pa.Table.from_batches([decode_arrow(body) for body in write_and_collect(spark, channel, sub, "arrow")])
    table = table.sort_by("id")
    assert table.column("id").to_pylist() == list(range(ROWS))
    assert pa.types.is_timestamp(table.schema.field("ts").type) and table.schema.field("ts").type.tz is not None
    assert table.schema.field("local_ts").type == pa.timestamp("us")
    assert table.schema.field("day").type == pa.date32()
    assert table.schema.field("amount").type == pa.decimal128(12, 3)
    instants = table.column("ts").cast(pa.timestamp("us", tz="UTC")).to_pylist()
    assert instants == [expected_instant(i) for i in range(ROWS)]
    assert table.column("day").to_pylist() == [FIRST_DAY + dt.timedelta(days=i) for i in range(ROWS)]
    assert table.column("amount").to_pylist() == [decimal.Decimal(i * 125).scaleb(-3) for i in range(ROWS)]


def test_json_value_writes_utc_rfc3339_timestamps_iso_dates_and_decimal_text(
    spark: Any, subscribed: tuple[str, affinity.Subscription]
) -> None:
    channel, sub = subscribed
    rows = sorted(
        (row for body in write_and_collect(spark, channel, sub, "json") for row in decode_json(body)),
        key=lambda row: int(row["id"]),
    )
    assert [row["id"] for row in rows] == list(range(ROWS))
    zone = ZoneInfo(SESSION_ZONE)
    for row in rows:
        instant = expected_instant(row["id"])
        assert row["ts"] == instant.isoformat(), "UTC with a +00:00 offset, whatever the session time zone"
        assert dt.datetime.fromisoformat(row["ts"]) == instant
        assert row["local_ts"] == instant.astimezone(zone).replace(tzinfo=None).isoformat(), "no offset"
        assert row["day"] == (FIRST_DAY + dt.timedelta(days=row["id"])).isoformat()
        assert row["amount"] == str(decimal.Decimal(row["id"] * 125).scaleb(-3))
