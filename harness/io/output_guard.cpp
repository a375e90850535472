#include "harness/io/output_guard.hpp"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "h5/h5.hpp"
#include "harness/io/results_schema.hpp"
#include "train/run_schema.hpp"
#include "weights/weights_schema.hpp"

namespace remat {
namespace fs = std::filesystem;

namespace {

// A page `remat report --html` wrote (render_html's first lines).
bool is_html_report(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char head[256] = {};
  in.read(head, sizeof head - 1);
  const std::string text(head);
  return text.rfind("<!DOCTYPE html>", 0) == 0 && text.find("<title>remat report") != std::string::npos;
}

}  // namespace

FileKind file_kind(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) return FileKind::absent;
  if (!fs::is_regular_file(path, ec)) return FileKind::not_hdf5;
  if (H5Fis_hdf5(path.c_str()) <= 0) return is_html_report(path) ? FileKind::html_report : FileKind::not_hdf5;
  try {
    const h5::File f = h5::File::open(path);
    const auto has = [&](std::string_view attribute) { return H5Aexists(f.id(), std::string(attribute).c_str()) > 0; };
    if (has(results::root::version.name)) return FileKind::results;
    if (has(run_file::root::version.name)) return FileKind::training_run;
    if (H5Aexists(f.id(), "lora") > 0) return FileKind::adapters;
    const bool params = h5::exists(f, weights_file::data::param.group()),
               grads = h5::exists(f, weights_file::data::grad.group());
    if (params && grads) return FileKind::golden;
    if (params) return FileKind::weights;
    if (grads) return FileKind::gradients;
  } catch (const UserError&) {
    return FileKind::not_hdf5;  // unreadable as HDF5: not a file remat made
  }
  return FileKind::other_hdf5;
}

const char* file_kind_name(FileKind k) {
  switch (k) {
    case FileKind::absent: return "no file";
    case FileKind::not_hdf5: return "a file that is not HDF5";
    case FileKind::results: return "a results file";
    case FileKind::weights: return "a weights file";
    case FileKind::gradients: return "a gradients file";
    case FileKind::golden: return "a golden file";
    case FileKind::training_run: return "a training run";
    case FileKind::adapters: return "a LoRA adapter file";
    case FileKind::other_hdf5: return "an HDF5 file remat did not write";
    case FileKind::html_report: return "a report page";
  }
  return "?";
}

void check_output_path(const std::string& out) {
  if (out.empty()) throw UserError("an empty path was given for an output file; name the file to write");
  std::error_code ec;
  const fs::file_status st = fs::status(out, ec);  // what a symlink points to
  if (fs::is_directory(st)) throw UserError(out + ": is a directory, not a file");
  if (fs::exists(st) && !fs::is_regular_file(st))
    throw UserError(out + ": exists and is not a regular file (a device, FIFO or socket); refusing to replace it");
}

void check_output(const std::string& out, FileKind writing, const std::vector<std::string>& inputs, bool force) {
  std::error_code ec;
  check_output_path(out);
  for (const auto& in : inputs)
    if (!in.empty() && fs::equivalent(in, out, ec))
      throw UserError(out + ": is also an input of this command (" + in + "); refusing to overwrite it, give another output");
  const FileKind existing = file_kind(out);
  if (existing != FileKind::absent && existing != writing && !force)
    throw UserError(out + ": exists and is " + file_kind_name(existing) + ", not " + file_kind_name(writing) +
                    "; refusing to replace it (pass --force to replace it, or give another output)");
  const fs::path parent = fs::path(out).parent_path();
  const std::string dir = parent.empty() ? "." : parent.string();
  if (!fs::is_directory(dir, ec)) throw UserError(out + ": no such directory " + dir);
  if (::access(dir.c_str(), W_OK) != 0) throw UserError(out + ": cannot write into directory " + dir);
  // The mode bits too: root may write anything, but a file its owner made
  // read-only is not one to replace behind their back.
  const auto perms = fs::status(out, ec).permissions();
  if (existing != FileKind::absent &&
      (::access(out.c_str(), W_OK) != 0 || (perms & (fs::perms::owner_write | fs::perms::group_write |
                                                     fs::perms::others_write)) == fs::perms::none))
    throw UserError(out + ": is read-only; refusing to replace it");
}

}  // namespace remat
