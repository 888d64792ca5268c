"""The incremental JSON string decoder (agent.llm.jsonstring) that shows a constrained step's
answer as the model writes it: every piece's characters come out as soon as they are known, an
escape cut between pieces waits only for its own missing characters, and a server's broken
escapes never fail the text."""

from __future__ import annotations

import json
import random

import pytest

from agent.llm.jsonstring import REPLACEMENT, JSONStringDecoder

TEXT = 'He said "hi"\n\tthen left \\ a/b é € 😀 𝄞 \r\x08\x0c end'


def _known(inside: str) -> str:
    """What the characters of a JSON string's inside `inside` decode to once the escape it may
    end in (cut short) is left out: decoded by `json`, independently of the decoder."""
    for cut in range(13):
        try:
            text = json.loads('"' + inside[:len(inside) - cut] + '"')
        except ValueError:
            continue
        if not (text and "\ud800" <= text[-1] <= "\udbff"):
            return text
    raise AssertionError(f"undecodable: {inside!r}")


def _pieces(written: str, sizes: list[int]) -> list[str]:
    out, i = [], 0
    for size in sizes:
        if i >= len(written):
            break
        out.append(written[i:i + size])
        i += size
    if i < len(written):
        out.append(written[i:])
    return out


@pytest.mark.parametrize("ascii_only", [True, False])
@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 7])
def test_each_piece_gives_every_character_it_completes_at_once(ascii_only, size):
    inside = json.dumps(TEXT, ensure_ascii=ascii_only)[1:]  # after the opening quote, the closing one included
    decoder, shown, fed = JSONStringDecoder(), "", ""
    for piece in _pieces(inside, [size] * len(inside)):
        shown += decoder.feed(piece)
        fed += piece
        if not decoder.closed:
            assert shown == _known(fed)  # nothing held but an escape's missing part
    assert shown == TEXT and decoder.closed and decoder.rest == ""


def test_random_cuts_of_random_text_decode_to_the_text():
    alphabet = 'ab "\\/\n\t\r\x01é€😀𝄞\u2028'
    rnd = random.Random(58)
    for _ in range(300):
        text = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 40)))
        inside = json.dumps(text, ensure_ascii=rnd.random() < 0.7)[1:] + ',"next": 1}'
        decoder, shown, fed, after = JSONStringDecoder(), "", "", ""
        for piece in _pieces(inside, [rnd.randint(1, 6) for _ in inside]):
            if decoder.closed:  # ignored: the caller reads on from `rest`
                assert decoder.feed(piece) == ""
                after += piece
                continue
            shown += decoder.feed(piece)
            fed += piece
            if not decoder.closed:
                assert shown == _known(fed)
        assert shown == text and decoder.rest + after == ',"next": 1}'  # what followed the closing quote


def test_an_escape_cut_between_pieces_waits_only_for_its_missing_part():
    decoder = JSONStringDecoder()
    assert decoder.feed("line one\\") == "line one"  # `\` at the end of a piece
    assert decoder.feed("nline two") == "\nline two"  # `n` at the start of the next
    assert decoder.feed("caf\\u00") == "caf"  # `\u00e9` cut in the middle
    assert decoder.feed("e9!") == "é!"
    assert decoder.feed("\\ud83d") == ""  # a surrogate pair's first half: the pair may follow
    assert decoder.feed("\\u") == ""
    assert decoder.feed("de00 ok") == "😀 ok"
    assert decoder.feed('"}') == "" and decoder.closed and decoder.rest == "}"
    assert decoder.feed("more") == ""  # after the closing quote nothing is the string's


@pytest.mark.parametrize("pieces,shown", [
    (["a\\uZZZZb"], "a\\uZZZZb"),  # not hex: kept as written
    (["a\\u12", "G4b"], "a\\u12G4b"),
    (["x\\qy"], "xqy"),  # an unknown escape: its character
    (["\\ud83dx"], REPLACEMENT + "x"),  # a high surrogate with no low half after it
    (["\\ud83d", "\\n"], REPLACEMENT + "\n"),
    (["\\ud83d\\u0041"], REPLACEMENT + "A"),  # the next escape is not a low half: read on its own
    (["\\ude00 lone low"], REPLACEMENT + " lone low"),
    (['\\ud83d"'], REPLACEMENT),  # the string closes after a lone half
    (["\x01 raw control \x7f"], "\x01 raw control \x7f"),  # what a lax server lets through
])
def test_broken_escapes_from_a_server_never_fail_the_text(pieces, shown):
    decoder = JSONStringDecoder()
    assert "".join(decoder.feed(p) for p in pieces) == shown


def test_a_plain_piece_is_given_back_as_it_is():
    decoder = JSONStringDecoder()
    piece = "plain words, no escapes"
    assert decoder.feed(piece) is piece  # the usual piece costs no copy
    assert decoder.feed("") == ""
