// Loading NIXL's C API (see nixl_capi.h).
#include "core/nixl/nixl_capi.h"

#include <dlfcn.h>

#include <mutex>
#include <stdexcept>

namespace gearjax::nixl {
namespace {

template <typename F>
void Resolve(void* library, const char* symbol, F* slot) {
  void* p = dlsym(library, symbol);
  if (p == nullptr) {
    throw std::runtime_error(std::string("NIXL's C API lacks ") + symbol +
                             ": this NIXL is not the version gearjax was written against");
  }
  *slot = reinterpret_cast<F>(p);
}

}  // namespace

const Api& LoadApi(const std::string& path) {
  static std::mutex mu;
  static std::string loaded_path;
  static Api api{};
  std::lock_guard<std::mutex> lock(mu);
  if (!loaded_path.empty()) {
    if (path != loaded_path) {
      throw std::runtime_error("NIXL's C API is already loaded from " + loaded_path +
                               ", not " + path);
    }
    return api;
  }
  // RTLD_LOCAL: NIXL's bundled libraries (UCX, abseil, gRPC) stay out of the
  // global namespace. Never unloaded: UCX keeps threads and handlers.
  void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* why = dlerror();
    throw std::runtime_error("could not load NIXL's C API (" + path +
                             "): " + (why ? why : "unknown error"));
  }
  Api a{};
  Resolve(library, "nixl_capi_create_configured_agent", &a.create_configured_agent);
  Resolve(library, "nixl_capi_destroy_agent", &a.destroy_agent);
  Resolve(library, "nixl_capi_create_params", &a.create_params);
  Resolve(library, "nixl_capi_destroy_params", &a.destroy_params);
  Resolve(library, "nixl_capi_create_backend", &a.create_backend);
  Resolve(library, "nixl_capi_destroy_backend", &a.destroy_backend);
  Resolve(library, "nixl_capi_create_reg_dlist", &a.create_reg_dlist);
  Resolve(library, "nixl_capi_reg_dlist_add_desc", &a.reg_dlist_add_desc);
  Resolve(library, "nixl_capi_destroy_reg_dlist", &a.destroy_reg_dlist);
  Resolve(library, "nixl_capi_register_mem", &a.register_mem);
  Resolve(library, "nixl_capi_deregister_mem", &a.deregister_mem);
  Resolve(library, "nixl_capi_get_local_md", &a.get_local_md);
  Resolve(library, "nixl_capi_load_remote_md", &a.load_remote_md);
  Resolve(library, "nixl_capi_invalidate_remote_md", &a.invalidate_remote_md);
  Resolve(library, "nixl_capi_create_xfer_dlist", &a.create_xfer_dlist);
  Resolve(library, "nixl_capi_xfer_dlist_add_desc", &a.xfer_dlist_add_desc);
  Resolve(library, "nixl_capi_destroy_xfer_dlist", &a.destroy_xfer_dlist);
  Resolve(library, "nixl_capi_create_xfer_req", &a.create_xfer_req);
  Resolve(library, "nixl_capi_post_xfer_req", &a.post_xfer_req);
  Resolve(library, "nixl_capi_get_xfer_status", &a.get_xfer_status);
  Resolve(library, "nixl_capi_release_xfer_req", &a.release_xfer_req);
  Resolve(library, "nixl_capi_destroy_xfer_req", &a.destroy_xfer_req);
  Resolve(library, "nixl_capi_gen_notif", &a.gen_notif);
  Resolve(library, "nixl_capi_create_notif_map", &a.create_notif_map);
  Resolve(library, "nixl_capi_destroy_notif_map", &a.destroy_notif_map);
  Resolve(library, "nixl_capi_get_notifs", &a.get_notifs);
  Resolve(library, "nixl_capi_notif_map_size", &a.notif_map_size);
  Resolve(library, "nixl_capi_notif_map_get_agent_at", &a.notif_map_get_agent_at);
  Resolve(library, "nixl_capi_notif_map_get_notifs_size", &a.notif_map_get_notifs_size);
  Resolve(library, "nixl_capi_notif_map_get_notif", &a.notif_map_get_notif);
  Resolve(library, "nixl_capi_notif_map_clear", &a.notif_map_clear);
  api = a;
  loaded_path = path;
  return api;
}

}  // namespace gearjax::nixl
