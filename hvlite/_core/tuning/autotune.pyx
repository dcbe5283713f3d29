"""Autotune: the fusion threshold and cycle time, tuned online over the first steps.

Rank 0 tries a grid of (threshold, cycle time) settings, each for a window of at least
`window_rounds` rounds and `window_seconds`, scoring bytes all-reduced per second of wall time;
then it measures the best three again and freezes on the best mean (single windows are noisy).
Every new setting is published through the coordinator (a flag bit and rank 0's answer), so all
ranks switch in the same round. Each trial is a CSV line in the log, when one is given.
"""
# distutils: language = c++
from libc.stdio cimport fopen, fclose, fprintf, fflush
from libcpp.string cimport string
from libcpp.vector cimport vector
from hvlite._core.request cimport hv_now, hv_monitor, hv_lock, hv_unlock

cdef extern from "stdio.h" nogil:
    ctypedef struct FILE


cdef bint _contains(vector[int]& v, int x) noexcept nogil:
    return _index(v, x) >= 0


cdef int _index(vector[int]& v, int x) noexcept nogil:
    cdef int i
    for i in range(<int>v.size()):
        if v[i] == x:
            return i
    return -1


cdef void tune_init(Tuner* t) noexcept nogil:
    t.on = False
    t.log = NULL


cdef void tune_start(Tuner* t, vector[size_t]& thresholds, vector[double]& cycles,
                     int warmup_rounds, int window_rounds, double window_seconds,
                     const string& log_path) noexcept nogil:
    t.thresholds = thresholds
    t.cycles = cycles
    t.trial = -1
    t.warmup_rounds = warmup_rounds
    t.window_rounds = window_rounds
    t.window_seconds = window_seconds
    t.rounds = 0
    t.bytes = 0
    t.scores.clear()
    t.finalists.clear()
    t.rescores.clear()
    t.final_pos = -1
    t.frozen = False
    t.publish = False
    t.best = -1
    if not log_path.empty():
        t.log = fopen(log_path.c_str(), b"w")
        if t.log != NULL:
            fprintf(t.log, b"trial,fusion_threshold_bytes,cycle_time_ms,rounds,bytes,seconds,GB_per_s,chosen\n")
            fflush(t.log)
    t.on = True


cdef void tune_window_reset(Tuner* t) noexcept nogil:
    """A new setting took effect: its window starts now."""
    t.rounds = 0
    t.bytes = 0
    t.t0 = hv_now()


cdef void tune_round(Tuner* t, double nbytes) noexcept nogil:
    """Rank 0, after each round: account it, and move to the next trial when a window ends."""
    cdef double now = hv_now(), secs, score
    cdef int i, k, best
    if not t.on or t.frozen or t.publish:
        return
    t.rounds += 1
    t.bytes += nbytes
    if t.trial < 0:
        if t.rounds >= t.warmup_rounds:
            t.trial = 0
            t.publish = True
        return
    secs = now - t.t0
    if t.rounds < t.window_rounds or secs < t.window_seconds:
        return
    score = t.bytes / secs
    if t.log != NULL:
        fprintf(t.log, "%d,%zu,%.3f,%d,%.0f,%.6f,%.4f,0\n", t.trial, t.thresholds[t.trial],
                t.cycles[t.trial] * 1e3, t.rounds, t.bytes, secs, score / 1e9)
        fflush(t.log)
    if t.final_pos < 0:
        t.scores.push_back(score)
        t.trial += 1
        if t.trial < <int>t.thresholds.size():
            t.publish = True
            return
        # second pass: the three best of the first, measured again
        for k in range(3 if t.scores.size() >= 3 else <int>t.scores.size()):
            best = -1
            for i in range(<int>t.scores.size()):
                if (best < 0 or t.scores[i] > t.scores[best]) and not _contains(t.finalists, i):
                    best = i
            t.finalists.push_back(best)
        t.final_pos = 0
        t.trial = t.finalists[0]
        t.publish = True
        return
    t.rescores.push_back(score)
    t.final_pos += 1
    if t.final_pos < <int>t.finalists.size():
        t.trial = t.finalists[t.final_pos]
        t.publish = True
        return
    t.best = t.finalists[0]
    for k in range(<int>t.finalists.size()):
        i = t.finalists[k]
        if (t.scores[i] + t.rescores[k]) > (t.scores[t.best] + t.rescores[_index(t.finalists, t.best)]):
            t.best = i
    t.trial = t.best
    t.frozen = True
    if t.log != NULL:
        fprintf(t.log, "%d,%zu,%.3f,0,0,0,%.4f,1\n", t.best, t.thresholds[t.best],
                t.cycles[t.best] * 1e3,
                (t.scores[t.best] + t.rescores[_index(t.finalists, t.best)]) / 2e9)
        fclose(t.log)
        t.log = NULL
    t.publish = True


cdef int tune_grid(Tuner* t, hv_monitor* mon, thresholds, cycles_ms, int warmup_rounds,
                   int window_rounds, double window_seconds, log_path) except -1:
    cdef vector[size_t] ts
    cdef vector[double] cs
    cdef string path = (log_path or "").encode()
    for th in thresholds:       # Python objects: converted (and refused) before the lock
        for c in cycles_ms:
            ts.push_back(th)
            cs.push_back(c / 1000.0)
    hv_lock(mon)
    tune_start(t, ts, cs, warmup_rounds, window_rounds, window_seconds, path)
    hv_unlock(mon)
    return 0
