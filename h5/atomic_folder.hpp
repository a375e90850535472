#pragma once
// Replacing a folder of files (a Hugging Face model folder: config.json, an
// index and its shards) as one unit, so that no reader ever sees part of one
// export and part of another. The new files are written into a staging
// folder beside the target, "<target>.partial.<pid>.<n>"; commit() carries
// over what the caller keeps of the old folder and exchanges the two folders
// in one rename (renameat2 RENAME_EXCHANGE), then removes the old one.
// Destroyed uncommitted (an error, a refusal), it removes the staging folder
// and the target stays exactly as it was, or absent; a writer killed before
// the exchange leaves only its staging folder, which the next write of the
// same target removes.
#include <functional>
#include <string>

namespace remat {

class AtomicFolder {
 public:
  // UserError for a target that is not a folder name ("", ".", "/") or that
  // exists and is not a folder.
  explicit AtomicFolder(const std::string& target);
  ~AtomicFolder();
  AtomicFolder(const AtomicFolder&) = delete;
  AtomicFolder& operator=(const AtomicFolder&) = delete;
  const std::string& path() const { return staging_; }  // write the new files here
  const std::string& target() const { return target_; }
  // Entries of the old folder that the new one does not have and `keep`
  // accepts (by name: a tokenizer beside the weights) are hard-linked into
  // it; then the new folder becomes the target.
  void commit(const std::function<bool(const std::string& name)>& keep);

 private:
  std::string target_, staging_;
  bool committed_ = false;
};

}  // namespace remat
