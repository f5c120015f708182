"""The progress bar of `tokenizer train`, `corpus build` and `corpus import`: the input bytes read, in MB and MB/s."""

from __future__ import annotations

from typing import Any

from tqdm.auto import tqdm


class ReadBar(tqdm):
    """A bar drawn once some input has been read, never before. tqdm draws a bar when it is made, when a warning
    is written above it and when it is closed, so an input refused at once (a dataset that cannot be loaded)
    left `corpus build: 0.00B [00:00, ?B/s]` twice before the one error line."""

    def __init__(self, desc: str, total: int, **options: Any) -> None:
        self.drawn = False  # set first: tqdm draws from its __init__
        super().__init__(desc=desc, total=total or None, unit="B", unit_scale=True, unit_divisor=1000,
                         dynamic_ncols=True, **options)

    def display(self, *args: Any, **kwargs: Any) -> bool:
        if not (self.drawn or self.n):
            return False
        self.drawn = True
        return super().display(*args, **kwargs)

    def clear(self, *args: Any, **kwargs: Any) -> None:
        if self.drawn:
            super().clear(*args, **kwargs)

    def close(self) -> None:
        if not (self.drawn or self.n):
            self.leave = False  # then tqdm ends the bar's line only if it drew one
        super().close()
