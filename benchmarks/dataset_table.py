"""Convert every staged data set with :func:`dmlr.convert` and check it against MANIFEST.md.

Each set is converted once into a temporary directory: the union of the
train and test files where split files exist (recorded as the store's
``train``/``test`` splits), the full-vocabulary Yahoo ``.npz`` pairs and
both RCV1 subset-1 versions. ``mediamill_discretized``'s test file ends with
a truncated line (MANIFEST quirk), converted with
``drop_truncated_last_line=True``.

Prints one markdown table: measured n, d, L and label cardinality next to
the values hard-coded from MANIFEST.md's Summary / Measured tables, whether
they agree (cardinality to MANIFEST's printed precision) and the conversion
time.

Usage::

    python benchmarks/dataset_table.py [--data-dir DIR]

``DIR`` defaults to ``$DMLR_DATA_DIR`` or ``<repo>/../shared/datasets``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
from _common import Table, timed

from dmlr.data.convert import convert
from dmlr.data.store import open_dataset
from dmlr.datasets import STAGED, data_dir

#: (staged set, MANIFEST n, d, L, card as printed there); files and options from dmlr.datasets.STAGED.
#: card: the union file's "Measured" value where one is staged, else the Summary table's.
SETS = [
    ("mediamill_discretized", 43851, 120, 101, "4.373"),
    ("mediamill_subset2000", 2000, 120, 101, "4.394"),
    ("emotions", 593, 72, 6, "1.8685"),
    ("yeast", 2417, 103, 14, "4.2371"),
    ("scene", 2407, 294, 6, "1.074"),
    ("enron", 1702, 1001, 53, "3.3784"),
    ("medical", 978, 1449, 45, "1.2454"),
    ("corel5k", 5000, 499, 374, "3.5220"),
    ("bibtex", 7395, 1836, 159, "2.4019"),
    ("image_subset600", 600, 294, 5, "1.2350"),
    ("yahoo_arts", 5000, 462, 26, "1.6360"),
    ("yahoo_business", 11214, 21924, 30, "1.5990"),
    ("yahoo_education", 12030, 27534, 33, "1.4632"),
    ("yahoo_recreation", 5000, 606, 22, "1.423"),
    ("tmc2007_500", 28596, 500, 22, "2.1579"),
    ("rcv1subset1", 6000, 47236, 101, "2.8797"),
    ("rcv1subset1_top944", 6000, 944, 101, "2.8797"),
    ("delicious", 16105, 500, 983, "19.0200"),
]


def card_matches(card: float, printed: str) -> bool:
    """Whether ``card`` rounds to MANIFEST's printed value at its precision."""
    decimals = len(printed.split(".")[1]) if "." in printed else 0
    return f"{card:.{decimals}f}" == printed


def convert_one(data_dir: Path, folder: str, files: list, options: dict, out: Path) -> tuple:
    """Convert one set; return (n, d, L, cardinality, seconds, split sizes, dropped-line notes)."""
    paths = [data_dir / folder / f for f in files]
    src = paths[0] if len(paths) == 1 else paths
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the dropped-line warning; it is noted in the table instead
        _, seconds = timed(convert, src, out, **options)
    ds = open_dataset(out)
    card = float(np.asarray(ds.Y.sum(axis=1).compute()).mean())
    splits = "/".join(str(len(ds.splits[k])) for k in ("train", "test") if k in ds.splits)
    notes = [s.strip() for s in ds.attrs["source"].split(";") if "dropped" in s]
    return ds.n_samples, ds.n_features, ds.n_labels, card, seconds, splits, notes


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=data_dir())
    args = parser.parse_args(argv)
    if not args.data_dir.is_dir():
        print(f"no data sets at {args.data_dir} (set DMLR_DATA_DIR)", file=sys.stderr)
        return 2
    Table("dataset; file(s); n; d; L; card; MANIFEST n/d/L/card; match?; seconds", markdown=True).print_header()
    footnotes, all_ok = [], True
    with tempfile.TemporaryDirectory(prefix="dmlr-table-") as tmp:
        for i, (name, n, d, l, card_txt) in enumerate(SETS):
            folder, files, options = STAGED[name]
            n_, d_, l_, card, sec, splits, notes = convert_one(
                args.data_dir, folder, files, options, Path(tmp) / f"{i}.zarr"
            )
            ok = (n_, d_, l_) == (n, d, l) and card_matches(card, card_txt)
            all_ok &= ok
            label = " + ".join(files) + (f" (splits {splits})" if splits else "")
            if notes:
                footnotes.append(
                    f"{folder}: converted with drop_truncated_last_line=True: {'; '.join(notes)} (MANIFEST quirk)"
                )
                label += f" [{len(footnotes)}]"
            print(
                f"| {folder} | {label} | {n_} | {d_} | {l_} | {card:.4f} | {n}/{d}/{l}/{card_txt} | "
                f"{'yes' if ok else 'NO'} | {sec:.2f} |"
            )
    for k, note in enumerate(footnotes, 1):
        print(f"\n[{k}] {note}")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
