/*
 * trace.h — the device's kernel timeline through CUPTI's activity API, for
 * `foxbench --trace` (built where the toolkit has CUPTI). Every kernel,
 * memset and memcpy from fox_trace_begin on, graph nodes included, with
 * its stream and its start and end on the device's clock: the critical
 * path's waits, which Nsight Compute's serialized kernel times cannot show.
 */
#ifndef FOX_BENCH_TRACE_H
#define FOX_BENCH_TRACE_H

/* Start recording (before the CUDA context exists, so that every graph is traced). */
int fox_trace_begin(char *err, size_t errlen);
/*
 * Wait for the device, stop recording and write what was recorded to path
 * as CSV: start_ns,end_ns,stream,kind,name (kernel names mangled).
 */
int fox_trace_end(const char *path, char *err, size_t errlen);

#endif
