"""Memory windows in Python: the rule every AGCU applies to its bursts
(:func:`hdl.agcu_engines.window_allows`, ``docs/agcu.md``, **Memory windows**) for the
functional model, and windows drawn from the regions a manifest declares.

A window is ``(base, size, read, write)``: bytes ``[base, base + size)``, readable
and/or writable. With windows on (a list, even empty), an access of ``nbytes`` at
``address`` is allowed only if it lies wholly inside one window with its permission;
``None``: windows off, everything allowed.
"""

from hdl.agcu_engines import DMA_WINDOWS, dma_windows_layout

__all__ = ["allows", "first_refused", "merge_regions", "copy_windows", "port_value"]


def allows(windows, address, nbytes, write):
    """Whether ``windows`` let ``nbytes`` at ``address`` be read (``write`` false) or
    written: off (``None``), or wholly inside one window with that access."""
    if windows is None:
        return True
    return any((write and w or not write and r) and base <= address and
               address + nbytes <= base + size for base, size, r, w in windows)


def first_refused(windows, address, nbytes, beat, write):
    """The address of the first ``beat``-byte beat of ``nbytes`` at ``address`` that
    ``windows`` refuse (:func:`allows`), or ``None``. The hardware checks whole bursts
    (up to 16 beats, never across 4 KiB); per beat gives the same verdict on a command
    whenever no burst straddles two windows (:func:`merge_regions` merges windows that
    touch)."""
    if windows is None:
        return None
    for offset in range(0, nbytes, beat):
        if not allows(windows, address + offset, min(beat, nbytes - offset), write):
            return address + offset
    return None


def merge_regions(regions, count, beat):
    """At most ``count`` windows covering ``regions`` ``[(address, nbytes, read,
    write)]``: each widened to whole ``beat`` s (the AGCU moves whole beats), regions
    that overlap or touch merged (the union of their accesses), then, while more than
    ``count`` remain, the two neighbours with the smallest gap between them merged (the
    gap is then allowed too). Returns ``[(base, size, read, write)]`` in address order."""
    spans = sorted([address // beat * beat, -(-(address + size) // beat) * beat, read,
                    write] for address, size, read, write in regions if size)
    merged = []
    for span in spans:
        if merged and span[0] <= merged[-1][1]:
            last = merged[-1]
            last[1] = max(last[1], span[1])
            last[2] |= span[2]
            last[3] |= span[3]
        else:
            merged.append(span)
    while len(merged) > count:
        gap = min(range(len(merged) - 1), key=lambda k: merged[k + 1][0] - merged[k][1])
        first, second = merged[gap], merged.pop(gap + 1)
        first[1] = max(first[1], second[1])
        first[2] |= second[2]
        first[3] |= second[3]
    return [(start, end - start, read, write) for start, end, read, write in merged]


def port_value(windows, enable=True):
    """The ``dma_windows`` port value (:func:`hdl.agcu_engines.dma_windows_layout`) of
    ``[(base, size, read, write)]`` (at most :data:`hdl.agcu_engines.DMA_WINDOWS`, the
    rest off); ``enable`` 0: every address allowed. Raises :class:`ValueError` for more
    windows than the AGCUs check."""
    if len(windows) > DMA_WINDOWS:
        raise ValueError(f"{len(windows)} memory windows, the AGCUs check {DMA_WINDOWS}")
    entries = [{"base": base, "size": size, "read": read, "write": write}
               for base, size, read, write in windows]
    entries += [{"base": 0, "size": 0, "read": 0, "write": 0}] * (DMA_WINDOWS - len(entries))
    return dma_windows_layout().const({"enable": int(enable),
                                       "window": entries}).as_value().value


def copy_windows(jobs, beat, count=DMA_WINDOWS):
    """The windows of AGCU ``COPY`` jobs ``[(agcu, src, dst, length)]``: each source
    read, each destination written (:func:`merge_regions`)."""
    return merge_regions([region for _, src, dst, length in jobs
                          for region in ((src, length, 1, 0), (dst, length, 0, 1))],
                         count, beat)
