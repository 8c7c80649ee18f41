// Message helpers of moex's readers (src/io/messages.h).
#include "src/io/messages.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>

#include "src/io/safetensors_header.h"

namespace moex::io {

std::string backticked(std::string_view s) {
    std::string out = "`";
    size_t keep = std::min<size_t>(s.size(), 120);
    while (keep < s.size() && keep > 0 && (uint8_t(s[keep]) & 0xc0) == 0x80) --keep;  // cut between characters
    const bool utf8 = utf8_invalid_at(s) == std::string_view::npos;  // else escape every non-ASCII byte too
    for (size_t i = 0; i < keep; ++i) {
        const auto c = uint8_t(s[i]);
        if (c < 0x20 || c == 0x7f || (c >= 0x80 && !utf8)) {
            char hex[8];
            std::snprintf(hex, sizeof hex, "\\x%02x", unsigned(c));
            out += hex;
        } else {
            out += char(c);
        }
    }
    if (keep < s.size()) out += "...";
    return out + "`";
}

std::string shape_text(const std::vector<int64_t>& shape) {
    std::string s = "(";
    for (size_t d = 0; d < shape.size(); ++d) s += (d ? ", " : "") + std::to_string(shape[d]);
    return s + (shape.size() == 1 ? ",)" : ")");
}

std::string file_kind(mode_t mode) {
    return S_ISDIR(mode)    ? "a directory"
           : S_ISFIFO(mode) ? "a FIFO"
           : S_ISCHR(mode)  ? "a character device"
           : S_ISBLK(mode)  ? "a block device"
           : S_ISSOCK(mode) ? "a socket"
           : S_ISLNK(mode)  ? "a symlink"
           : S_ISREG(mode)  ? "a regular file"
                            : "not a plain file";
}

std::string json_reason(const std::exception& e) {
    std::string what = e.what();
    if (auto at = what.find("] "); at != std::string::npos) what.erase(0, at + 2);
    if (what.size() > 200) {
        size_t cut = 200;
        while (cut > 0 && (uint8_t(what[cut]) & 0xc0) == 0x80) --cut;  // between UTF-8 characters
        what = what.substr(0, cut) + "...";
    }
    return what;
}

}  // namespace moex::io
