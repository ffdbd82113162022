// C++ exceptions become the Python classes of switchyard/_errors.py, which also derive from the
// matching builtins (ValueError, TimeoutError, NotImplementedError, OSError). The message is kept.
#include "switchyard/errors.hpp"

#include <exception>
#include <new>

#include "bindings.hpp"

namespace switchyard::python {

namespace {
// Borrowed from switchyard._errors, which the package imports before _C; kept for the process's life.
struct ErrorClasses {
  PyObject* error = nullptr;
  PyObject* invalid_argument = nullptr;
  PyObject* unsupported = nullptr;
  PyObject* timeout = nullptr;
  PyObject* system = nullptr;
  PyObject* capacity = nullptr;
};
ErrorClasses g_classes;

PyObject* class_of(nb::module_& errors, const char* name) {
  // NOTES: leaked on purpose: translators may run during interpreter shutdown.
  return errors.attr(name).inc_ref().ptr();
}
}  // namespace

void raise_as_python(const std::exception_ptr& thrown) {
  try {
    std::rethrow_exception(thrown);
  } catch (const InvalidArgument& error) {
    PyErr_SetString(g_classes.invalid_argument, error.what());
  } catch (const Unsupported& error) {
    PyErr_SetString(g_classes.unsupported, error.what());
  } catch (const TimeoutError& error) {
    PyErr_SetString(g_classes.timeout, error.what());
  } catch (const SystemError& error) {
    PyErr_SetString(g_classes.system, error.what());
  } catch (const CapacityError& error) {
    PyErr_SetString(g_classes.capacity, error.what());
  } catch (const Error& error) {
    PyErr_SetString(g_classes.error, error.what());
  }
}

void raise_any_as_python(const std::exception_ptr& thrown) noexcept {
  try {
    raise_as_python(thrown);
  } catch (const std::bad_alloc&) {
    PyErr_NoMemory();
  } catch (const std::exception& error) {
    PyErr_SetString(PyExc_RuntimeError, error.what());
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, "switchyard: an unknown C++ exception");
  }
}

void bind_errors(nb::module_& m) {
  nb::module_ errors = nb::module_::import_("switchyard._errors");
  g_classes.error = class_of(errors, "Error");
  g_classes.invalid_argument = class_of(errors, "InvalidArgument");
  g_classes.unsupported = class_of(errors, "Unsupported");
  g_classes.timeout = class_of(errors, "TimeoutError");
  g_classes.system = class_of(errors, "SystemError");
  g_classes.capacity = class_of(errors, "CapacityError");
  m.attr("Error") = nb::handle(g_classes.error);

  nb::register_exception_translator([](const std::exception_ptr& thrown, void*) { raise_as_python(thrown); });
}

}  // namespace switchyard::python
