#!/usr/bin/python3
"""DuplexClient's documented flow with a TCP cut (scripts/vllm-omni-clients.sh runs it).

Drives vllm-omni's own client module, unchanged (vllm_omni.clients.duplex on PYTHONPATH), as its
docs use it: ``async with DuplexClient(...)``, ``stream_pcm``, ``commit()``, ``responses()``
with ``ack_playback``, then ``wait_for("response.done")`` and ``close()``. While the first
answer streams, the TCP connection is aborted under the client (the transport's abort(), no
close frame); the client must resume on its own. Checks: the same session, one
connection.resumed, every numbered event dispatched once with no gap, an answer after the cut,
no error event. Prints a JSON summary; exit 0 when every check holds.
"""

import argparse
import asyncio
import json
import sys
from pathlib import Path

import websockets

from vllm_omni.clients.duplex import (
    DuplexClient,
    DuplexConnectionError,
    EventCollector,
    ReconnectPolicy,
    SessionConfig,
    read_pcm16_wav,
)


class Tap:
    """A websockets connection that counts what it reads and can be cut."""

    def __init__(self, ws):
        self.ws = ws

    async def send(self, data):
        await self.ws.send(data)

    async def recv(self):
        return await self.ws.recv()

    async def close(self):
        await self.ws.close()

    def cut(self):
        self.ws.transport.abort()


async def ack(client, handle):
    """ack_playback, again once the client has resumed when the cut made the send fail."""
    for _ in range(300):
        try:
            await client.ack_playback(handle.played_ms, response_id=handle.response_id)
            return
        except DuplexConnectionError:
            await asyncio.sleep(0.1)
    raise TimeoutError("the client did not resume within 30 s")


async def run(args):
    taps = []

    async def connect(url):
        tap = Tap(await websockets.connect(url, max_size=64 << 20))
        taps.append(tap)
        return tap

    pcm = read_pcm16_wav(Path(args.wav))
    collector = EventCollector()
    client = DuplexClient(args.url, model=args.model, config=SessionConfig(), connect=connect,
                          reconnect=ReconnectPolicy(), heartbeat_interval_s=None, handshake_timeout_s=30)
    answers = []
    async with client:
        session_id = client.session_id
        consume = asyncio.create_task(collector.consume(client))
        await client.stream_pcm(pcm, chunk_ms=100)
        await client.commit()
        async for handle in client.responses():
            if handle.decision == "listen":
                continue
            async for _chunk in handle.audio():
                if len(taps) == 1:
                    taps[0].cut()  # the TCP connection drops mid-answer
                await ack(client, handle)
            answers.append({"response_id": handle.response_id, "played_ms": round(handle.played_ms),
                            "transcript": handle.transcript})
            break
        await client.stream_pcm(pcm, chunk_ms=100)
        await client.commit()
        done = await client.wait_for("response.done", timeout_s=60)
        answers.append({"response_id": done.response_id, "status": done.raw["response"]["status"]})
        resumed_id = client.session_id
        await client.close(timeout_s=30)
        try:
            await asyncio.wait_for(consume, 5)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            consume.cancel()
    seqs = [e["server_event_seq"] for e in collector.events if isinstance(e.get("server_event_seq"), int)]
    gaps = [(a, b) for a, b in zip(seqs, seqs[1:]) if b != a + 1]
    result = {
        "session_id": session_id,
        "same_session": resumed_id == session_id,
        "connections": len(taps),
        "connection_resumed": collector.count("connection.resumed"),
        "numbered_events": len(seqs),
        "first_seq": seqs[0] if seqs else None,
        "last_seq": seqs[-1] if seqs else None,
        "gaps": gaps,
        "duplicates": len(seqs) - len(set(seqs)),
        "errors": collector.errors(),
        "answers": answers,
        "session_closed": collector.count("session.closed"),
    }
    result["ok"] = (result["same_session"] and len(taps) == 2 and result["connection_resumed"] == 1
                    and not gaps and not result["duplicates"] and not result["errors"]
                    and len(answers) == 2 and result["session_closed"] == 1)
    return result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default="ws://127.0.0.1:8099")
    parser.add_argument("--model", default="dummy:tiny")
    parser.add_argument("--wav", required=True, help="mono 16 kHz PCM16 speech")
    result = asyncio.run(run(parser.parse_args()))
    print(json.dumps(result, indent=2))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
