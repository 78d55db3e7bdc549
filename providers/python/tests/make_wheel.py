"""Writes a minimal pure-Python wheel by hand (no setuptools, no network), for tests.

Usage: python make_wheel.py NAME VERSION OUT_DIR
"""
import base64, hashlib, os, sys, zipfile
name, version, out = sys.argv[1:4]
dist = f"{name}-{version}"
files = {
    f"{name}/__init__.py": f"def hello():\n    return 'hello from {name}'\n",
    f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
    f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: toolbox-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = []
with zipfile.ZipFile(os.path.join(out, f"{dist}-py3-none-any.whl"), "w") as z:
    for path, text in files.items():
        data = text.encode()
        z.writestr(path, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist}.dist-info/RECORD,,")
    z.writestr(f"{dist}.dist-info/RECORD", "\n".join(record) + "\n")
