"""Is this upload really audio, and how long is it? Read from the container's own headers in
pure Python (no ffmpeg): WAV, Ogg (Opus, Vorbis, Speex), WebM/Matroska, MP3, MP4/M4A, FLAC and
ADTS AAC. A browser's MediaRecorder writes WebM without a duration (Chrome) or MP4 (Safari), so
the length of a WebM is the time of its last block, found by walking its clusters."""

from __future__ import annotations

import struct
from dataclasses import dataclass

MIME = {"webm": "audio/webm", "ogg": "audio/ogg", "wav": "audio/wav", "mp3": "audio/mpeg", "m4a": "audio/mp4",
        "flac": "audio/flac", "aac": "audio/aac"}
KINDS = "WebM, Ogg/Opus, MP3, WAV, M4A, FLAC or AAC"


class NotAudio(ValueError):
    """The bytes are not audio Navi can read; the message says why."""


@dataclass(frozen=True)
class AudioInfo:
    kind: str  # a key of MIME, also the file extension the speech server is told
    duration_s: float | None  # None: the container does not say and has no timed frames

    @property
    def mime(self) -> str:
        return MIME[self.kind]


def inspect(data: bytes) -> AudioInfo:
    """The container and duration of `data`, or NotAudio saying what it is instead."""
    if len(data) < 12:
        raise NotAudio("the file is empty or too short to be a recording")
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        return AudioInfo("wav", _wav_duration(data))
    if data[:4] == b"OggS":
        return AudioInfo("ogg", _ogg_duration(data))
    if data[:4] == b"\x1a\x45\xdf\xa3":
        return AudioInfo("webm", _matroska_duration(data))
    if data[4:8] == b"ftyp":
        return AudioInfo("m4a", _mp4_duration(data))
    if data[:4] == b"fLaC":
        return AudioInfo("flac", _flac_duration(data))
    if data[:3] == b"ID3" or (data[0] == 0xFF and data[1] & 0xE0 == 0xE0):
        start = _id3_end(data)
        if _adts_header(data, start) is not None:
            return AudioInfo("aac", _adts_duration(data, start))
        return AudioInfo("mp3", _mp3_duration(data, start))
    raise NotAudio(f"the file is not audio (it starts with {_describe(data)}); send {KINDS}")


def _describe(data: bytes) -> str:
    head = data[:8]
    known = {b"%PDF": "a PDF", b"\x89PNG": "a PNG image", b"\xff\xd8\xff": "a JPEG image", b"PK\x03\x04": "a zip archive",
             b"\x7fELF": "a program", b"GIF8": "a GIF image", b"<": "markup"}
    for magic, name in known.items():
        if head.startswith(magic):
            return name
    if all(32 <= b < 127 or b in (9, 10, 13) for b in head):
        return "text"
    return "bytes " + head.hex(" ")


def _u16(data: bytes, at: int, order: str = "<") -> int:
    return struct.unpack_from(order + "H", data, at)[0]


def _u32(data: bytes, at: int, order: str = "<") -> int:
    return struct.unpack_from(order + "I", data, at)[0]


# --- WAV ---------------------------------------------------------------------------------------
def _wav_duration(data: bytes) -> float:
    at, byte_rate, size = 12, 0, None
    while at + 8 <= len(data):
        chunk, length = data[at:at + 4], _u32(data, at + 4)
        if chunk == b"fmt ":
            if length < 16 or at + 24 > len(data):
                break
            byte_rate = _u32(data, at + 16)
        elif chunk == b"data":
            left = len(data) - at - 8
            size = left if length in (0, 0xFFFFFFFF) or length > left else length  # streamed WAVs leave it open
            break
        at += 8 + length + (length & 1)
    if not byte_rate or size is None:
        raise NotAudio("the WAV file has no audio format or no sound data")
    return size / byte_rate


# --- Ogg -----------------------------------------------------------------------------------------
def _ogg_pages(data: bytes):
    """(granule position, serial, first packet bytes of the page) of every page."""
    at = 0
    while True:
        at = data.find(b"OggS", at)
        if at < 0 or at + 27 > len(data):
            return
        segments = data[at + 26]
        table = data[at + 27:at + 27 + segments]
        body = at + 27 + segments
        granule, serial = struct.unpack_from("<qI", data, at + 6)
        yield granule, serial, data[body:body + 64]
        at = body + sum(table)


def _ogg_duration(data: bytes) -> float | None:
    rate = skip = serial = None
    last = None
    for granule, page_serial, head in _ogg_pages(data):
        if rate is None:
            if head.startswith(b"OpusHead") and len(head) >= 12:
                rate, skip = 48000, _u16(head, 10)
            elif head.startswith(b"\x01vorbis") and len(head) >= 16:
                rate, skip = _u32(head, 12), 0
            elif head.startswith(b"Speex   ") and len(head) >= 40:
                rate, skip = _u32(head, 36), 0
            elif head.startswith((b"\x80theora", b"\x01video", b"fishead")):
                continue  # a video stream or a skeleton: the audio stream may follow
            else:
                continue
            serial = page_serial
        elif page_serial == serial and granule >= 0:
            last = granule
    if not rate:
        raise NotAudio("the Ogg file holds no Opus, Vorbis or Speex audio")
    return None if last is None else max(0, last - skip) / rate


# --- WebM / Matroska ------------------------------------------------------------------------------
_MASTERS = {0x1A45DFA3, 0x18538067, 0x1549A966, 0x1654AE6B, 0xAE, 0x1F43B675, 0xA0}  # walked into, not skipped
_UNKNOWN = object()


def _vint(data: bytes, at: int, keep_marker: bool) -> tuple[int | object, int]:
    """(value, length) of an EBML variable-size integer (an element id keeps its marker bit)."""
    first = data[at]
    length = 1
    while length <= 8 and not first & (0x80 >> (length - 1)):
        length += 1
    if length > 8 or at + length > len(data):
        raise IndexError("bad EBML number")
    value = first if keep_marker else first & (0xFF >> length)
    for b in data[at + 1:at + length]:
        value = (value << 8) | b
    if not keep_marker and value == (1 << (7 * length)) - 1:
        return _UNKNOWN, length  # an "unknown size" (a live recording's segment and clusters)
    return value, length


def _matroska_duration(data: bytes) -> float | None:
    scale, declared, cluster, last_block = 1_000_000, None, 0, None
    doc_type, kinds = b"", set()
    at, steps = 0, 0
    try:
        while at < len(data) and steps < 2_000_000:
            steps += 1
            element, id_len = _vint(data, at, keep_marker=True)
            size, size_len = _vint(data, at + id_len, keep_marker=False)
            body = at + id_len + size_len
            if element in _MASTERS:
                at = body  # its children follow in place, whatever its size says
                continue
            if size is _UNKNOWN:
                break
            payload = data[body:body + size]
            if element == 0x4282:
                doc_type = payload.rstrip(b"\0")
            elif element == 0x2AD7B1:
                scale = int.from_bytes(payload, "big") or scale
            elif element == 0x4489 and size in (4, 8):
                declared = struct.unpack(">f" if size == 4 else ">d", payload)[0]
            elif element == 0x83:
                kinds.add(int.from_bytes(payload, "big"))
            elif element == 0xE7:
                cluster = int.from_bytes(payload, "big")
            elif element in (0xA3, 0xA1) and len(payload) > 3:
                _, track_len = _vint(payload, 0, keep_marker=False)
                relative = struct.unpack_from(">h", payload, track_len)[0]
                last_block = max(last_block or 0, cluster + relative)
            at = body + size
    except (IndexError, struct.error):
        pass  # a truncated tail: what was read so far counts
    if doc_type not in (b"webm", b"matroska"):
        raise NotAudio("the file starts like WebM/Matroska but is not one")
    if 1 in kinds:
        raise NotAudio("the WebM file is a video; send the audio alone")
    if 2 not in kinds:
        raise NotAudio("the WebM file has no audio track")
    found = [t * scale / 1e9 for t in (declared, last_block) if t is not None]
    return max(found) if found else None


# --- MP4 / M4A -----------------------------------------------------------------------------------------
_CONTAINERS = {b"moov", b"trak", b"mdia", b"minf", b"moof", b"traf", b"mvex", b"edts"}


def _boxes(data: bytes, start: int, end: int):
    at = start
    while at + 8 <= end:
        size, kind = _u32(data, at, ">"), data[at + 4:at + 8]
        header = 8
        if size == 1 and at + 16 <= end:
            size, header = struct.unpack_from(">Q", data, at + 8)[0], 16
        elif size == 0:
            size = end - at
        if size < header:
            return
        yield kind, at + header, min(at + size, end)
        at += size


def _mp4_duration(data: bytes) -> float | None:
    found = {"movie": None, "mehd": None, "handlers": [], "track_scale": None, "fragments": 0,
             "default": 0}

    def full_box_times(body: int) -> tuple[int, int]:
        version = data[body]
        if version == 1:
            return _u32(data, body + 20, ">"), struct.unpack_from(">Q", data, body + 24)[0]
        return _u32(data, body + 12, ">"), _u32(data, body + 16, ">")

    def walk(start: int, end: int) -> None:
        for kind, body, stop in _boxes(data, start, end):
            if kind in _CONTAINERS:
                walk(body, stop)
            elif kind == b"mvhd":
                scale, duration = full_box_times(body)
                found["movie"] = duration / scale if scale and duration else None
            elif kind == b"mdhd" and found["track_scale"] is None:
                found["track_scale"] = full_box_times(body)[0] or None
            elif kind == b"hdlr":
                found["handlers"].append(data[body + 8:body + 12])
            elif kind == b"mehd":
                found["mehd"] = struct.unpack_from(">Q" if data[body] == 1 else ">I", data, body + 4)[0]
            elif kind == b"trex":
                found["default"] = _u32(data, body + 12, ">")
            elif kind == b"tfhd":
                flags = int.from_bytes(data[body + 1:body + 4], "big")
                at = body + 8 + (8 if flags & 1 else 0) + (4 if flags & 2 else 0)
                if flags & 8:
                    found["fragment_default"] = _u32(data, at, ">")
            elif kind == b"trun":
                found["fragments"] += _trun_ticks(data, body, found.get("fragment_default") or found["default"])

    try:
        walk(0, len(data))
    except (IndexError, struct.error):
        pass
    handlers = found["handlers"]
    if b"vide" in handlers:
        raise NotAudio("the MP4 file is a video; send the audio alone")
    if b"soun" not in handlers:
        raise NotAudio("the MP4/M4A file has no audio track")
    if found["movie"]:
        return found["movie"]
    scale = found["track_scale"]
    ticks = found["mehd"] or found["fragments"]
    return ticks / scale if scale and ticks else None


def _trun_ticks(data: bytes, body: int, default: int) -> int:
    """The duration of one track run (a fragment of a recording) in its track's ticks."""
    flags = int.from_bytes(data[body + 1:body + 4], "big")
    count = _u32(data, body + 4, ">")
    at = body + 8 + (4 if flags & 0x1 else 0) + (4 if flags & 0x4 else 0)
    if not flags & 0x100:
        return count * default
    step = 4 * sum(1 for bit in (0x100, 0x200, 0x400, 0x800) if flags & bit)
    return sum(_u32(data, at + i * step, ">") for i in range(count))


# --- FLAC --------------------------------------------------------------------------------------------
def _flac_duration(data: bytes) -> float | None:
    if len(data) < 8 + 18 or data[4] & 0x7F != 0:
        raise NotAudio("the FLAC file has no stream information")
    info = data[8:8 + 18]
    rate = int.from_bytes(info[10:13], "big") >> 4
    samples = int.from_bytes(info[13:18], "big") & 0xFFFFFFFFF
    if not rate:
        raise NotAudio("the FLAC file has no sample rate")
    return samples / rate if samples else None


# --- MP3 and ADTS AAC ---------------------------------------------------------------------------------
_MP3_RATES = {3: (44100, 48000, 32000), 2: (22050, 24000, 16000), 0: (11025, 12000, 8000)}
_MP3_BITRATES = {
    (3, 3): (0, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448),
    (3, 2): (0, 32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384),
    (3, 1): (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),
    (2, 3): (0, 32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256),
    (2, 2): (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
}
_MP3_BITRATES[(2, 1)] = _MP3_BITRATES[(2, 2)]
_AAC_RATES = (96000, 88200, 64000, 48000, 44100, 32000, 24000, 22050, 16000, 12000, 11025, 8000, 7350)
MAX_FRAMES = 2_000_000


def _id3_end(data: bytes) -> int:
    if data[:3] != b"ID3" or len(data) < 10:
        return 0
    size = 0
    for b in data[6:10]:
        size = (size << 7) | (b & 0x7F)
    return 10 + size + (10 if data[5] & 0x10 else 0)


def _mp3_frame(data: bytes, at: int) -> tuple[int, int, int] | None:
    """(frame length, samples, sample rate) of an MPEG audio frame header at `at`, else None."""
    if at + 4 > len(data) or data[at] != 0xFF or data[at + 1] & 0xE0 != 0xE0:
        return None
    version, layer = (data[at + 1] >> 3) & 3, (data[at + 1] >> 1) & 3
    rate_index, bitrate_index = (data[at + 2] >> 2) & 3, data[at + 2] >> 4
    if version == 1 or layer == 0 or rate_index == 3 or bitrate_index in (0, 15):
        return None
    rate = _MP3_RATES[version][rate_index]
    bitrate = _MP3_BITRATES[(3 if version == 3 else 2, layer)][bitrate_index] * 1000
    padding = (data[at + 2] >> 1) & 1
    if layer == 3:  # Layer I
        return (12 * bitrate // rate + padding) * 4, 384, rate
    samples = 1152 if layer == 2 or version == 3 else 576
    return samples // 8 * bitrate // rate + padding, samples, rate


def _first_mp3_frame(data: bytes, start: int) -> int | None:
    """Where the frames begin: the first header whose next frame is where it says (not chance bytes)."""
    at, limit = start, min(len(data), start + 64 * 1024)
    while 0 <= at < limit:
        first = _mp3_frame(data, at)
        if first and (at + first[0] == len(data) or _mp3_frame(data, at + first[0])):
            return at
        at = data.find(b"\xff", at + 1)
    return None


def _mp3_duration(data: bytes, start: int) -> float:
    at = _first_mp3_frame(data, start)
    if at is None:
        raise NotAudio("the file is not audio: no MP3 frames in it")
    seconds, frames = 0.0, 0
    while frames < MAX_FRAMES and (frame := _mp3_frame(data, at)) is not None:
        length, samples, rate = frame
        seconds += samples / rate
        frames += 1
        at += length
    return seconds


def _adts_header(data: bytes, at: int) -> tuple[int, float] | None:
    """(frame length, seconds) of an ADTS AAC frame at `at`, else None."""
    if at + 7 > len(data) or data[at] != 0xFF or data[at + 1] & 0xF6 != 0xF0:
        return None
    rate_index = (data[at + 2] >> 2) & 0xF
    length = ((data[at + 3] & 3) << 11) | (data[at + 4] << 3) | (data[at + 5] >> 5)
    if rate_index >= len(_AAC_RATES) or length < 7:
        return None
    blocks = (data[at + 6] & 3) + 1
    return length, blocks * 1024 / _AAC_RATES[rate_index]


def _adts_duration(data: bytes, at: int) -> float:
    seconds, frames = 0.0, 0
    while frames < MAX_FRAMES and (frame := _adts_header(data, at)) is not None:
        seconds += frame[1]
        at += frame[0]
        frames += 1
    return seconds
