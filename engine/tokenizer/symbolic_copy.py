#!/usr/bin/env python3
"""Copies a shared library and sets DF_SYMBOLIC in its DT_FLAGS (what -Bsymbolic does at link time).

Used by sanitizer builds (-DABCD_ASAN=ON) for Debian's libsentencepiece.so.0: it bundles its own
protobuf-lite and exports those symbols. The normal build keeps them private by dlopen()ing the
SentencePiece plugin with RTLD_DEEPBIND, which AddressSanitizer refuses. With DF_SYMBOLIC the
dynamic loader resolves the library's references in the library itself first, so its
protobuf-lite binds to itself and not to gRPC's libprotobuf, while malloc/free and everything it
does not define still resolve through the global scope (to the sanitizer's interceptors).

usage: symbolic_copy.py SOURCE.so DESTINATION.so
"""
import os
import struct
import sys

PT_DYNAMIC, DT_NULL, DT_FLAGS, DF_SYMBOLIC = 2, 0, 30, 0x2


def main(source, destination):
    with open(source, 'rb') as f:
        data = bytearray(f.read())
    if data[:4] != b'\x7fELF' or data[4] != 2 or data[5] != 1:
        sys.exit(f'{source}: not a 64-bit little-endian ELF file')
    phoff, = struct.unpack_from('<Q', data, 0x20)
    phentsize, phnum = struct.unpack_from('<HH', data, 0x36)
    for i in range(phnum):
        header = phoff + i * phentsize
        if struct.unpack_from('<I', data, header)[0] != PT_DYNAMIC:
            continue
        offset, = struct.unpack_from('<Q', data, header + 8)
        size, = struct.unpack_from('<Q', data, header + 32)
        for entry in range(offset, offset + size, 16):
            tag, value = struct.unpack_from('<qQ', data, entry)
            if tag == DT_NULL:
                break
            if tag == DT_FLAGS:
                struct.pack_into('<Q', data, entry + 8, value | DF_SYMBOLIC)
                os.makedirs(os.path.dirname(os.path.abspath(destination)), exist_ok=True)
                with open(destination, 'wb') as f:
                    f.write(data)
                return
    sys.exit(f'{source}: no DT_FLAGS entry in the dynamic section (link it with -Wl,-z,now)')


if __name__ == '__main__':
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
