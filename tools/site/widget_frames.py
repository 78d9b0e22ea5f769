"""The explorers' pre-rendered frames in the pages' widget state, made smaller without changing a pixel."""

from __future__ import annotations

import base64
import io
import json
import re
import zlib

from .layout import HTML

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
WIDGET_STATE = re.compile(r'<script type="application/vnd.jupyter.widget-state\+json">(.*?)</script>', re.S)


def smaller_png(data: bytes) -> bytes:
    """The same PNG, pixel for pixel, with its image data compressed at zlib's level 9. The
    explorers' frames are written at level 3 (attnlab/figures/frames.py: quick in a kernel); on the site
    level 9 makes them about a fifth smaller. Returns ``data`` itself when that is not smaller."""
    if not data.startswith(PNG_SIGNATURE):
        return data
    chunks, image, pos = [], b"", len(PNG_SIGNATURE)
    while pos < len(data):
        length = int.from_bytes(data[pos:pos + 4], "big")
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IDAT":
            if not image:
                chunks.append((b"IDAT", None))  # where the image data goes
            image += body
        else:
            chunks.append((kind, body))
    packed = zlib.compress(zlib.decompress(image), 9)
    out = [PNG_SIGNATURE]
    for kind, body in chunks:
        body = packed if body is None else body
        out.append(len(body).to_bytes(4, "big") + kind + body + zlib.crc32(kind + body).to_bytes(4, "big"))
    smaller = b"".join(out)
    return smaller if len(smaller) < len(data) else data


def webp_frame(png: bytes) -> bytes | None:
    """The PNG as a lossless WebP when that holds the same pixels (both decoded and compared)
    and is smaller; None otherwise. WebP's lossless mode codes the explorers' palette frames
    about a fifth smaller than PNG at zlib's level 9 (quality 75, method 4: 0.02 s a frame;
    quality 100 with method 5 saves 1.4 % more at 17 times the time)."""
    from PIL import Image  # Pillow, with its WebP codec

    with Image.open(io.BytesIO(png)) as image:
        pixels = image.convert("RGBA")
        out = io.BytesIO()
        image.save(out, format="webp", lossless=True, quality=75, method=4, exact=True)
    webp = out.getvalue()
    if len(webp) >= len(png):
        return None
    with Image.open(io.BytesIO(webp)) as back:
        same = back.size == pixels.size and back.convert("RGBA").tobytes() == pixels.tobytes()
    return webp if same else None


def compress_frames(lang: str) -> tuple[int, int]:
    """Every pre-rendered widget frame of one site's pages (PNGs in the pages' widget state) as a
    lossless WebP (webp_frame; the Image model's ``format`` becomes "webp", so the widget manager
    gives the browser the right type), else through smaller_png. The widget state is written back
    without JSON's optional spaces (the same state). Returns (bytes before, bytes after) of the
    pages changed."""
    before = after = 0
    for path in (HTML / lang).rglob("*.html"):
        text = path.read_text("utf-8")
        found = WIDGET_STATE.search(text)
        if not found:
            continue
        state = json.loads(found.group(1))
        for model in state["state"].values():
            for buffer in model.get("buffers", []):
                if buffer.get("encoding") != "base64":
                    continue
                data = smaller_png(base64.b64decode(buffer["data"]))
                frame = model.get("model_name") == "ImageModel" and buffer.get("path") == ["value"] \
                    and model["state"].get("format") == "png" and data.startswith(PNG_SIGNATURE)
                webp = webp_frame(data) if frame else None
                if webp:
                    data, model["state"]["format"] = webp, "webp"
                buffer["data"] = base64.b64encode(data).decode("ascii")
        packed = json.dumps(state, separators=(",", ":"))  # ASCII only, as before: \uXXXX escapes
        if "</script" in packed.lower():
            raise ValueError(f"{path}: the widget state would end its script element")
        new = text[:found.start(1)] + packed + text[found.end(1):]
        if new != text:
            before, after = before + len(text.encode()), after + len(new.encode())
            path.write_text(new, "utf-8")
    return before, after
