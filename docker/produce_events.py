"""Put demo events into the example stream of the Docker Compose demo.

``docker compose exec airflow python /opt/kd/docker/produce_events.py --count 1000 --first-id 1``
puts events ``first-id .. first-id + count - 1`` (JSON ``event_id``, ``user_id``, ``amount``),
partitioned by ``user_id`` across the stream's shards, through the connection ``aws_default``.
"""

from __future__ import annotations

import argparse
import os

from airflow.providers.amazon.aws.hooks.kinesis import KinesisHook

from kinesis_doris_devstack.scenario import event, put_events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000, help="number of events")
    parser.add_argument("--first-id", type=int, default=1, help="event_id of the first event")
    parser.add_argument("--stream", default=os.environ.get("KD_EXAMPLE_STREAM", "events"))
    args = parser.parse_args()
    kinesis = KinesisHook(aws_conn_id="aws_default").conn
    events = [event(event_id) for event_id in range(args.first_id, args.first_id + args.count)]
    results = put_events(kinesis, args.stream, events)
    shards = sorted({result["ShardId"] for result in results})
    last_id = args.first_id + args.count - 1
    print(f"put {len(results)} events, event_id {args.first_id}..{last_id}, into {args.stream} ({shards})")


if __name__ == "__main__":
    main()
