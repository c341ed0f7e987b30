// Whether two paths name one file, or two files hold the same bytes (commands.h).
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli/commands.h"

namespace sluice::cli {

bool same_file(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty()) return false;
  if (a == b) return true;
  struct stat sa {}, sb {};
  if (::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0) {
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;  // hard links too
  }
  // One does not exist yet: compare the paths they would have. A symbolic link to a file not
  // made yet is written through, so it is followed first (weakly_canonical stops at it).
  auto would_be = [](const std::string& path, std::error_code& ec) {
    namespace fs = std::filesystem;
    fs::path p = fs::absolute(path, ec);
    std::error_code missing;  // a path that does not exist is no link: not an error here
    for (int hops = 0; !ec && hops < 40 && fs::is_symlink(fs::symlink_status(p, missing)); ++hops) {
      const fs::path to = fs::read_symlink(p, ec);
      p = to.is_absolute() ? to : p.parent_path() / to;
    }
    return ec ? p : fs::weakly_canonical(p, ec);
  };
  std::error_code ec1, ec2;
  const auto ca = would_be(a, ec1);
  const auto cb = would_be(b, ec2);
  return !ec1 && !ec2 && ca == cb;
}

bool same_bytes(const std::string& a, const std::string& b) {
  std::error_code ea, eb;
  const auto size = std::filesystem::file_size(a, ea);
  if (ea || size != std::filesystem::file_size(b, eb) || eb) return false;
  std::ifstream fa(a, std::ios::binary), fb(b, std::ios::binary);
  if (!fa || !fb) return false;
  std::vector<char> ba(1 << 20), bb(1 << 20);
  while (fa && fb) {
    fa.read(ba.data(), static_cast<std::streamsize>(ba.size()));
    fb.read(bb.data(), static_cast<std::streamsize>(bb.size()));
    if (fa.gcount() != fb.gcount() || !std::equal(ba.begin(), ba.begin() + fa.gcount(), bb.begin())) return false;
  }
  return fa.eof() && fb.eof();
}

}  // namespace sluice::cli
