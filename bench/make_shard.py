"""Write a synthetic llm.c token shard: a 256-int32 header (magic 20240520,
version 1, token count, zeros), then that many little-endian uint16 tokens,
uniform in [0, vocab). Python standard library only.

usage: make_shard.py PATH TOKENS VOCAB SEED"""
import random
import struct
import sys
from array import array


def main():
    path, count, vocab, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    if not 0 < vocab <= 65536:
        sys.exit("make_shard.py: vocab must be in 1..65536 (uint16 tokens)")
    rng = random.Random(seed)
    header = [0] * 256
    header[0], header[1], header[2] = 20240520, 1, count
    tokens = array("H", (rng.randrange(vocab) for _ in range(count)))
    if sys.byteorder != "little":
        tokens.byteswap()
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(tokens.tobytes())


if __name__ == "__main__":
    main()
