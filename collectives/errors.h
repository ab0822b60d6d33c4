// The two ways a collective fails that callers must tell apart from a plain
// bug: the ranks were not doing the same thing (CollectiveMismatch), or some
// rank never came (CollectiveTimeout). Both are kiln::Error (kind
// RuntimeError) so they cross the API like any other error; the message
// starts with the class name so a Python user can recognise it.
#pragma once

#include <string>
#include <vector>

#include "runtime/base/error.h"

namespace kiln::collectives {

class CollectiveMismatch : public Error {
 public:
  // `ranks`: the group ranks whose message differed from rank 0's.
  CollectiveMismatch(std::string group, std::vector<int> ranks, const std::string& detail);
  const std::string& group() const { return group_; }
  const std::vector<int>& ranks() const { return ranks_; }

 private:
  std::string group_;
  std::vector<int> ranks_;
};

class CollectiveTimeout : public Error {
 public:
  // `missing`: ranks known not to have arrived; empty when MPI cannot tell.
  CollectiveTimeout(std::string group, std::vector<int> missing, double elapsed_s,
                    const std::string& detail);
  const std::string& group() const { return group_; }
  const std::vector<int>& missing() const { return missing_; }
  double elapsed_s() const { return elapsed_s_; }

 private:
  std::string group_;
  std::vector<int> missing_;
  double elapsed_s_;
};

}  // namespace kiln::collectives
