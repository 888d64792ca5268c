"""Recordings made in Python for the voice tests, the fake speech server and the benchmark:
a WAV tone (also Chromium's fake microphone), Ogg/Opus (what Telegram voice notes are), a WebM
like a browser's MediaRecorder writes (no duration, unknown-size segment and clusters), MP3
frames, MP4/M4A (plain and fragmented) and FLAC. Their containers are real; the sound in the
compressed ones is silence."""

from __future__ import annotations

import math
import struct

OPUS_SILENCE = b"\xf8\xff\xfe"  # one 20 ms Opus (CELT) frame of silence


# --- WAV ---------------------------------------------------------------------------------------
def wav(parts: list[tuple[float, float]], rate: int = 48000) -> bytes:
    """16-bit mono PCM: each part is (seconds, tone frequency in Hz; 0 = silence)."""
    frames = bytearray()
    for seconds, freq in parts:
        for i in range(int(seconds * rate)):
            value = int(12000 * math.sin(2 * math.pi * freq * i / rate)) if freq else 0
            frames += struct.pack("<h", value)
    header = b"RIFF" + struct.pack("<I", 36 + len(frames)) + b"WAVE"
    fmt = b"fmt " + struct.pack("<IHHIIHH", 16, 1, 1, rate, rate * 2, 2, 16)
    return header + fmt + b"data" + struct.pack("<I", len(frames)) + bytes(frames)


def wav_tone(seconds: float, freq: float = 440.0, rate: int = 16000) -> bytes:
    return wav([(seconds, freq)], rate)


# --- Ogg / Opus -------------------------------------------------------------------------------------
def _crc_table() -> list[int]:
    table = []
    for i in range(256):
        r = i << 24
        for _ in range(8):
            r = ((r << 1) ^ 0x04C11DB7) & 0xFFFFFFFF if r & 0x80000000 else (r << 1) & 0xFFFFFFFF
        table.append(r)
    return table


_CRC = _crc_table()


def _ogg_crc(data: bytes) -> int:
    crc = 0
    for b in data:
        crc = ((crc << 8) & 0xFFFFFFFF) ^ _CRC[((crc >> 24) & 0xFF) ^ b]
    return crc


def _ogg_page(packets: list[bytes], granule: int, seq: int, flags: int, serial: int = 0x4E415649) -> bytes:
    lacing = bytearray()
    for packet in packets:
        lacing += b"\xff" * (len(packet) // 255) + bytes([len(packet) % 255])
    header = b"OggS" + struct.pack("<BBqIIIB", 0, flags, granule, serial, seq, 0, len(lacing)) + bytes(lacing)
    page = bytearray(header + b"".join(packets))
    page[22:26] = struct.pack("<I", _ogg_crc(bytes(page)))
    return bytes(page)


def ogg_opus(seconds: float, pre_skip: int = 312) -> bytes:
    """An Ogg/Opus file of `seconds` of silence (50 frames a second, one page a second)."""
    head = b"OpusHead" + struct.pack("<BBHIhB", 1, 1, pre_skip, 48000, 0, 0)
    tags = b"OpusTags" + struct.pack("<I", 4) + b"navi" + struct.pack("<I", 0)
    pages = [_ogg_page([head], 0, 0, 0x02), _ogg_page([tags], 0, 1, 0)]
    frames = round(seconds * 50)
    seq, done = 2, 0
    while done < frames:
        count = min(50, frames - done)
        done += count
        last = done == frames
        pages.append(_ogg_page([OPUS_SILENCE] * count, pre_skip + done * 960, seq, 0x04 if last else 0))
        seq += 1
    return b"".join(pages)


# --- WebM ---------------------------------------------------------------------------------------------
def _ebml_id(element: int) -> bytes:
    return element.to_bytes((element.bit_length() + 7) // 8, "big")


def _element(element: int, payload: bytes) -> bytes:
    return _ebml_id(element) + b"\x01" + len(payload).to_bytes(7, "big") + payload


def _uint(element: int, value: int) -> bytes:
    return _element(element, value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big"))


UNKNOWN_SIZE = b"\x01\xff\xff\xff\xff\xff\xff\xff"


def webm(seconds: float, video: bool = False, with_audio: bool = True) -> bytes:
    """A WebM as Chrome's MediaRecorder writes it: no Duration, an unknown-size segment and
    unknown-size clusters of 20 ms Opus blocks, one cluster a second."""
    header = _element(0x1A45DFA3, _uint(0x4286, 1) + _element(0x4282, b"webm") + _uint(0x4287, 4))
    info = _element(0x1549A966, _uint(0x2AD7B1, 1_000_000) + _element(0x4D80, b"navi-tests"))
    entries = b""
    if with_audio:
        entries += _element(0xAE, _uint(0xD7, 1) + _uint(0x83, 2) + _element(0x86, b"A_OPUS"))
    if video:
        entries += _element(0xAE, _uint(0xD7, 2) + _uint(0x83, 1) + _element(0x86, b"V_VP8"))
    body = info + _element(0x1654AE6B, entries)
    total_ms, at = int(seconds * 1000), 0
    while at < total_ms:
        cluster = _uint(0xE7, at)
        for offset in range(0, min(1000, total_ms - at), 20):
            cluster += _element(0xA3, b"\x81" + struct.pack(">h", offset) + b"\x80" + OPUS_SILENCE)
        body += _ebml_id(0x1F43B675) + UNKNOWN_SIZE + cluster
        at += 1000
    return header + _ebml_id(0x18538067) + UNKNOWN_SIZE + body


# --- MP3 --------------------------------------------------------------------------------------------------
def mp3(seconds: float, id3: bool = True) -> bytes:
    """MPEG-1 Layer III frames, 128 kbit/s, 44.1 kHz (1152 samples each), after an ID3v2 tag."""
    frame = b"\xff\xfb\x90\x00" + b"\x00" * (417 - 4)
    count = round(seconds * 44100 / 1152)
    tag = b"ID3\x04\x00\x00" + bytes([0, 0, 0, 10]) + b"\x00" * 10 if id3 else b""
    return tag + frame * count


# --- MP4 / M4A ----------------------------------------------------------------------------------------
def _box(kind: bytes, payload: bytes) -> bytes:
    return struct.pack(">I", 8 + len(payload)) + kind + payload


def _full(kind: bytes, payload: bytes, version: int = 0, flags: int = 0) -> bytes:
    return _box(kind, bytes([version]) + flags.to_bytes(3, "big") + payload)


def _track(handler: bytes, scale: int, duration: int) -> bytes:
    mdhd = _full(b"mdhd", struct.pack(">IIII", 0, 0, scale, duration) + b"\x00" * 4)
    hdlr = _full(b"hdlr", struct.pack(">I", 0) + handler + b"\x00" * 12 + b"sound\x00")
    return _box(b"trak", _box(b"mdia", mdhd + hdlr + _box(b"minf", b"")))


def m4a(seconds: float, fragmented: bool = False, video: bool = False) -> bytes:
    ftyp = _box(b"ftyp", b"M4A " + struct.pack(">I", 0) + b"isomM4A mp42")
    scale = 48000
    if not fragmented:
        mvhd = _full(b"mvhd", struct.pack(">IIII", 0, 0, 1000, int(seconds * 1000)) + b"\x00" * 80)
        tracks = _track(b"soun", scale, int(seconds * scale)) + (_track(b"vide", 90000, 0) if video else b"")
        return ftyp + _box(b"moov", mvhd + tracks) + _box(b"mdat", b"\x00" * 64)
    mvhd = _full(b"mvhd", struct.pack(">IIII", 0, 0, 1000, 0) + b"\x00" * 80)
    trex = _full(b"trex", struct.pack(">IIIII", 1, 1, 0, 0, 0))
    moov = _box(b"moov", mvhd + _box(b"mvex", trex) + _track(b"soun", scale, 0))
    fragments = b""
    samples = int(seconds * scale / 1024)
    for start in range(0, samples, 50):  # a fragment of up to 50 AAC frames (1024 ticks each)
        count = min(50, samples - start)
        tfhd = _full(b"tfhd", struct.pack(">I", 1))
        trun = _full(b"trun", struct.pack(">I", count) + struct.pack(">I", 1024) * count, flags=0x100)
        fragments += _box(b"moof", _box(b"traf", tfhd + trun)) + _box(b"mdat", b"\x00" * 16)
    return ftyp + moov + fragments


# --- FLAC -------------------------------------------------------------------------------------------------
def flac(seconds: float, rate: int = 16000) -> bytes:
    samples = int(seconds * rate)
    info = struct.pack(">HH", 4096, 4096) + b"\x00" * 6
    packed = (rate << 44) | (0 << 41) | (15 << 36) | samples  # 20 bits rate, 3 channels-1, 5 bits-1, 36 samples
    info += packed.to_bytes(8, "big") + b"\x00" * 16
    return b"fLaC" + bytes([0x80]) + len(info).to_bytes(3, "big") + info
