#!/usr/bin/env python3
"""SHA-256 prefix and size of each `.text.*` section of cubins: `text_hash.py A.cubin [B.cubin ...]`.
Two builds of a kernel run the same code when these agree: a cubin's file hash also covers
its symbols, its constants' section and the ptxas options it records (bench/cuda/NOTES.md
session 27), which change with no change of code."""
import hashlib, struct, sys


def text_sections(path):
    elf = open(path, "rb").read()
    assert elf[:4] == b"\x7fELF" and elf[4] == 2, f"{path}: not a 64-bit ELF"
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    def header(i):
        return struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize)
    names_off = header(shstrndx)[4]
    for i in range(shnum):
        name_at, _, _, _, off, size = header(i)[:6]
        end = elf.index(b"\0", names_off + name_at)
        name = elf[names_off + name_at:end].decode()
        if name.startswith(".text."):
            yield name, size, hashlib.sha256(elf[off:off + size]).hexdigest()[:16]


for path in sys.argv[1:]:
    for name, size, digest in text_sections(path):
        print(f"{path}: {name} {size} B {digest}")
