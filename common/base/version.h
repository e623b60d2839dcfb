// The project's version, printed by every binary's --version and reported over the API.
#ifndef MT_COMMON_BASE_VERSION_H_
#define MT_COMMON_BASE_VERSION_H_

namespace mt {

inline constexpr char kVersion[] = "0.1.0";
inline constexpr char kApiVersion[] = "mt.v1";

}  // namespace mt

#endif  // MT_COMMON_BASE_VERSION_H_
