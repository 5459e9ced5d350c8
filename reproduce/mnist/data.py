"""MNIST from the four standard gzipped IDX files: find, check (md5), parse (numpy), augment.

The directory is `--data-dir`, else $NEURAL_ODES_DATA, else ~/.cache/neural-odes/mnist. Every file
is checked against the md5 of the original release before it is used; a missing or corrupt file
raises `MNISTDataError` naming the file and what to do. `download` (opt-in, `--download`) fetches
missing files from public mirrors and applies the same check before a file is kept.
"""
import gzip
import hashlib
import os
import shutil
import tempfile
import urllib.error
import urllib.request

import numpy as np

ENV = "NEURAL_ODES_DATA"
DEFAULT_DIR = os.path.join("~", ".cache", "neural-odes", "mnist")

# The original release (LeCun, Cortes, Burges): name -> md5 of the gzipped file.
FILES = {
    "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
    "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
    "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
    "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
}
MIRRORS = ("https://ossci-datasets.s3.amazonaws.com/mnist/",
           "https://storage.googleapis.com/cvdf-datasets/mnist/",
           "http://yann.lecun.com/exdb/mnist/")

# IDX type codes (the third byte of the magic number) -> big-endian numpy dtypes.
IDX_TYPES = {0x08: np.dtype("u1"), 0x09: np.dtype("i1"), 0x0B: np.dtype(">i2"),
             0x0C: np.dtype(">i4"), 0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}


class MNISTDataError(ValueError):
    """A data file is missing, corrupt or unreadable; the message says which and what to do."""


class MNISTDownloadError(MNISTDataError):
    """No mirror gave a file with the right md5: possibly transient (the network), so a command
    that meets it fails rather than being refused, and a rerun may succeed."""


def data_dir(path=None):
    """The MNIST directory: `path`, else $NEURAL_ODES_DATA, else ~/.cache/neural-odes/mnist."""
    return os.path.abspath(os.path.expanduser(path or os.environ.get(ENV) or DEFAULT_DIR))


def md5(path, chunk=1 << 20):
    digest = hashlib.md5()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


def _how_to_fix(directory):
    return (f"Put the four MNIST files ({', '.join(FILES)}) in {directory}, or point "
            f"--data-dir or ${ENV} at a folder holding them, or rerun with --download.")


def check(directory, files=FILES):
    """Raise MNISTDataError unless every file is in `directory` with its md5."""
    for name, expected in files.items():
        path = os.path.join(directory, name)
        if not os.path.isfile(path):
            raise MNISTDataError(f"MNIST file {path} is missing. {_how_to_fix(directory)}")
        actual = md5(path)
        if actual != expected:
            raise MNISTDataError(
                f"MNIST file {path} is corrupt or not the original: md5 {actual}, expected "
                f"{expected}. Delete it. {_how_to_fix(directory)}")


def download(directory, files=FILES, mirrors=MIRRORS, timeout=60):
    """Fetch each missing file from the first mirror that serves it with the right md5.

    A file is written under a temporary name and renamed only after its md5 matched, so a failed
    or partial download never leaves a file that looks valid. Files already present are left
    alone (`check` judges them). Raises MNISTDataError for a folder that cannot be made or
    written, MNISTDownloadError when no mirror gives a file."""
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as error:
        raise MNISTDataError(f"cannot make the MNIST folder {directory}: "
                             f"{error.strerror or error}") from None
    for name, expected in files.items():
        path = os.path.join(directory, name)
        if os.path.exists(path):
            continue
        failures = []
        for mirror in mirrors:
            url = mirror + name
            try:
                fd, tmp = tempfile.mkstemp(dir=directory, prefix=name + ".", suffix=".part")
            except OSError as error:
                raise MNISTDataError(f"cannot write in the MNIST folder {directory}: "
                                     f"{error.strerror or error}") from None
            try:
                with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as r:
                    shutil.copyfileobj(r, out)
                actual = md5(tmp)
                if actual == expected:
                    os.replace(tmp, path)
                    break
                failures.append(f"{url}: md5 {actual}, expected {expected}")
            except (OSError, urllib.error.URLError) as error:  # HTTPError and timeouts included
                failures.append(f"{url}: {error}")
            finally:
                if os.path.exists(tmp):
                    os.remove(tmp)
        else:
            raise MNISTDownloadError(
                f"could not download MNIST file {name} into {directory}:\n  "
                + "\n  ".join(failures)
                + f"\nWithout a network, copy the four files ({', '.join(FILES)}) there by hand "
                  f"or point --data-dir or ${ENV} at a folder holding them.")


def parse_idx(raw, name="IDX data"):
    """An IDX file's bytes (uncompressed) -> numpy array.

    Format: two zero bytes, a type code, the number of dimensions d, then d big-endian uint32
    sizes and the values in C order (big-endian for multi-byte types)."""
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise MNISTDataError(f"{name}: not an IDX file (bad magic number)")
    dtype, ndim = IDX_TYPES.get(raw[2]), raw[3]
    if dtype is None:
        raise MNISTDataError(f"{name}: unknown IDX type code 0x{raw[2]:02x}")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise MNISTDataError(f"{name}: truncated IDX header")
    shape = tuple(int(s) for s in np.frombuffer(raw, ">u4", ndim, offset=4))
    count = int(np.prod(shape, dtype=np.int64))
    if len(raw) != header + count * dtype.itemsize:
        raise MNISTDataError(f"{name}: {len(raw) - header} data bytes, the header {shape} "
                             f"({dtype}) needs {count * dtype.itemsize}")
    return np.frombuffer(raw, dtype, count, offset=header).reshape(shape).astype(
        dtype.newbyteorder("="))


def read_idx_gz(path):
    try:
        with gzip.open(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError) as error:
        raise MNISTDataError(f"{path}: cannot decompress ({error})") from error
    return parse_idx(raw, path)


def load(directory=None, fetch=False):
    """{'train': (images, labels), 'test': (images, labels)}: uint8 images (N, 28, 28) and int64
    labels (N,), after the md5 check (and a download of missing files if fetch)."""
    directory = data_dir(directory)
    if fetch:
        download(directory)
    check(directory)
    out = {}
    for split, prefix in (("train", "train"), ("test", "t10k")):
        images = read_idx_gz(os.path.join(directory, f"{prefix}-images-idx3-ubyte.gz"))
        labels = read_idx_gz(os.path.join(directory, f"{prefix}-labels-idx1-ubyte.gz"))
        if images.ndim != 3 or labels.shape != images.shape[:1]:
            raise MNISTDataError(f"{directory}: {split} images {images.shape} and labels "
                                 f"{labels.shape} do not match")
        out[split] = (images, labels.astype(np.int64))
    return out


def to_float(images):
    """uint8 (N, 28, 28) -> float64 (N, 28, 28, 1) in [0, 1] (NHWC, as the TF layers take)."""
    return (images[..., None] / 255.0).astype(np.float64)


def random_crop(rng, images, padding=4):
    """Each image padded with `padding` zeros on every side, then a random crop of its original
    size (torchvision's RandomCrop(28, padding=4)): shifts of -4..4 pixels in each direction."""
    n, h, w = images.shape
    padded = np.pad(images, ((0, 0), (padding, padding), (padding, padding)))
    dy, dx = rng.randint(0, 2 * padding + 1, size=(2, n))
    rows = dy[:, None] + np.arange(h)
    cols = dx[:, None] + np.arange(w)
    return padded[np.arange(n)[:, None, None], rows[:, :, None], cols[:, None, :]]
