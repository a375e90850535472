#pragma once
// Before a command writes its output file: never over one of its own inputs,
// and never over a file of another kind (a results file, a weights file)
// unless the user said --force. Replacing a file of the same kind (exporting
// the same weights again) is what a user expects and is allowed. Call it
// before any work, so a refusal costs nothing.
#include <string>
#include <vector>

namespace remat {

// What a remat HDF5 file holds, judged from its contents.
enum class FileKind { absent, not_hdf5, results, weights, gradients, golden, training_run, adapters, other_hdf5, html_report };
FileKind file_kind(const std::string& path);
const char* file_kind_name(FileKind k);

// Throws UserError if `out` is empty, a folder, or exists and is not a
// regular file (a device, a FIFO: never replaced, --force or not).
void check_output_path(const std::string& out);

// Throws UserError as check_output_path does, if `out` is one of `inputs` (the same file under any
// name), or if it exists and is not of kind `writing` (unless `force`), or
// if its directory cannot be written.
void check_output(const std::string& out, FileKind writing, const std::vector<std::string>& inputs, bool force);

}  // namespace remat
