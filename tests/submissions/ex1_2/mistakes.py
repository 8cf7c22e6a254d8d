"""Exercise 1.2's negative controls that are one edit of a correct solution (see ../edits.py)."""

BASE = "correct_async.py"

MISTAKES = {
    "wrong_sends_before_receiving": (
        "every rank sends with a blocking send before it receives: each waits for its right neighbor forever",
        [("        request = dist.isend(chunk(out).clone(), nxt)\n        dist.recv(received, prv)\n        request.wait()\n"
          "        chunk(into).add_(received)\n",
          "        dist.send(chunk(out).clone(), nxt)\n        dist.recv(received, prv)\n"
          "        chunk(into).add_(received)\n")]),
    "wrong_even_chunks": (
        "cuts len(tensor) // world_size elements per chunk: the remainder is never summed",
        [("    sizes = [len(tensor) // world + (1 if i < len(tensor) % world else 0) for i in range(world)]\n",
          "    sizes = [len(tensor) // world for i in range(world)]\n")]),
}
