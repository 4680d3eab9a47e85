/* The archive's recorder in C: what the broker calls on its event loop for every routed message.
 *
 * The Python recorder (`archive_columns.PublishColumns`) is the reference: this module records
 * the same rows (tests/storage/test_archive_recorder.py compares them) without a Python frame per
 * message, and copies topics as UTF-8 instead of keeping the strings. Measured in process, the C
 * recorder took about 0.2 us per message off the event loop.
 *
 * Two types:
 *
 * - `Buffer`: a growable column of fixed-width items (doubles, uint32, bytes) that exports its
 *   memory through the buffer protocol, so pyarrow wraps it without a copy. It keeps its capacity
 *   across `clear()` (the tap reuses its columns batch after batch, their pages staying mapped)
 *   and refuses to grow or clear while an export (an Arrow array, a memoryview) points into it.
 * - `Recorder`: holds the columns of one batch and records a message into them (`record(m)`),
 *   calling `on_full()` once the batch has `limit` rows. The table of publishers stays in
 *   Python: a message whose `origin` has no row yet (and every message without an origin) is
 *   handed to the Python `new_row(m)`, once per connection and batch.
 *
 * Built by `pip install` (setup.py, optional): without a compiler the Python recorder is used.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

/* -- Buffer ----------------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    char *data;
    Py_ssize_t size;     /* bytes used */
    Py_ssize_t capacity; /* bytes allocated */
    Py_ssize_t itemsize;
    Py_ssize_t exports;  /* live buffer views: no realloc, no clear while > 0 */
    char format[2];      /* struct format of one item: "d", "I" or "B" */
} Buffer;

static PyTypeObject BufferType;

static int
buffer_reserve(Buffer *self, Py_ssize_t more)
{
    Py_ssize_t need = self->size + more;
    if (need <= self->capacity)
        return 0;
    if (self->exports > 0) {
        PyErr_SetString(PyExc_BufferError, "archive column grown while exported");
        return -1;
    }
    Py_ssize_t capacity = self->capacity ? self->capacity : 4096;
    while (capacity < need) {
        if (capacity > PY_SSIZE_T_MAX / 2) {
            PyErr_NoMemory();
            return -1;
        }
        capacity *= 2;
    }
    char *data = PyMem_RawRealloc(self->data, (size_t)capacity);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    self->data = data;
    self->capacity = capacity;
    return 0;
}

static inline int
buffer_put(Buffer *self, const void *item, Py_ssize_t n)
{
    if (self->size + n > self->capacity && buffer_reserve(self, n) < 0)
        return -1;
    memcpy(self->data + self->size, item, (size_t)n);
    self->size += n;
    return 0;
}

static int
Buffer_init(Buffer *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"format", NULL};
    const char *format;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "s", kwlist, &format))
        return -1;
    switch (format[0]) {
    case 'd': self->itemsize = sizeof(double); break;
    case 'I': self->itemsize = sizeof(uint32_t); break;
    case 'B': self->itemsize = 1; break;
    default:
        PyErr_Format(PyExc_ValueError, "unsupported item format %R (d, I or B)", PyTuple_GET_ITEM(args, 0));
        return -1;
    }
    if (format[1] != '\0') {
        PyErr_SetString(PyExc_ValueError, "one item format character (d, I or B)");
        return -1;
    }
    if (self->exports > 0) {
        PyErr_SetString(PyExc_BufferError, "archive column re-initialised while exported");
        return -1;
    }
    self->format[0] = format[0];
    self->format[1] = '\0';
    self->size = 0;
    return 0;
}

static void
Buffer_dealloc(Buffer *self)
{
    PyMem_RawFree(self->data);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
Buffer_getbuffer(Buffer *self, Py_buffer *view, int flags)
{
    /* Read-only views: nothing outside this module writes into a column. */
    if (PyBuffer_FillInfo(view, (PyObject *)self, self->data ? self->data : "", self->size, 1,
                          flags & ~PyBUF_FORMAT) < 0)
        return -1;
    if (flags & PyBUF_FORMAT)
        view->format = self->format;
    view->itemsize = self->itemsize;
    if (flags & PyBUF_ND) {
        /* shape is the item count; FillInfo pointed it at view->len (bytes) */
        view->ndim = 1;
        view->shape = NULL;
        if (self->itemsize != 1) {
            /* Py_buffer has no room of its own for a shape: use internal (our item count). */
            view->internal = (void *)(self->size / self->itemsize);
            view->shape = (Py_ssize_t *)&view->internal;
        }
        else {
            view->shape = &view->len;
        }
    }
    self->exports++;
    return 0;
}

static void
Buffer_releasebuffer(Buffer *self, Py_buffer *view)
{
    self->exports--;
}

static PyBufferProcs Buffer_as_buffer = {
    (getbufferproc)Buffer_getbuffer,
    (releasebufferproc)Buffer_releasebuffer,
};

static Py_ssize_t
Buffer_len(Buffer *self)
{
    return self->size / self->itemsize;
}

static PySequenceMethods Buffer_as_sequence = {
    .sq_length = (lenfunc)Buffer_len,
};

static PyObject *
Buffer_clear(Buffer *self, PyObject *Py_UNUSED(ignored))
{
    if (self->exports > 0) {
        PyErr_SetString(PyExc_BufferError, "archive column cleared while exported");
        return NULL;
    }
    self->size = 0;
    Py_RETURN_NONE;
}

static PyObject *
Buffer_append(Buffer *self, PyObject *value)
{
    /* For callers outside the recorder (tests, tools): one item. */
    if (self->format[0] == 'd') {
        double d = PyFloat_AsDouble(value);
        if (d == -1.0 && PyErr_Occurred())
            return NULL;
        if (buffer_put(self, &d, sizeof d) < 0)
            return NULL;
    }
    else {
        unsigned long v = PyLong_AsUnsignedLong(value);
        if (v == (unsigned long)-1 && PyErr_Occurred())
            return NULL;
        if (self->format[0] == 'I') {
            uint32_t u = (uint32_t)v;
            if (v > UINT32_MAX) {
                PyErr_SetString(PyExc_OverflowError, "value out of range for uint32");
                return NULL;
            }
            if (buffer_put(self, &u, sizeof u) < 0)
                return NULL;
        }
        else {
            uint8_t b = (uint8_t)v;
            if (v > 255) {
                PyErr_SetString(PyExc_OverflowError, "value out of range for a byte");
                return NULL;
            }
            if (buffer_put(self, &b, 1) < 0)
                return NULL;
        }
    }
    Py_RETURN_NONE;
}

static PyObject *
Buffer_get_nbytes(Buffer *self, void *closure)
{
    return PyLong_FromSsize_t(self->size);
}

static PyObject *
Buffer_get_capacity(Buffer *self, void *closure)
{
    return PyLong_FromSsize_t(self->capacity);
}

static PyObject *
Buffer_get_exports(Buffer *self, void *closure)
{
    return PyLong_FromSsize_t(self->exports);
}

static PyMethodDef Buffer_methods[] = {
    {"clear", (PyCFunction)Buffer_clear, METH_NOARGS, "Empty the column, keeping its capacity."},
    {"append", (PyCFunction)Buffer_append, METH_O, "Append one item."},
    {NULL},
};

static PyGetSetDef Buffer_getset[] = {
    {"nbytes", (getter)Buffer_get_nbytes, NULL, "bytes used", NULL},
    {"capacity", (getter)Buffer_get_capacity, NULL, "bytes allocated", NULL},
    {"exports", (getter)Buffer_get_exports, NULL, "live views into the column", NULL},
    {NULL},
};

static PyTypeObject BufferType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "data_plane.storage._recorder.Buffer",
    .tp_basicsize = sizeof(Buffer),
    .tp_dealloc = (destructor)Buffer_dealloc,
    .tp_as_sequence = &Buffer_as_sequence,
    .tp_as_buffer = &Buffer_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A growable column of fixed-width items, exported without a copy.",
    .tp_methods = Buffer_methods,
    .tp_getset = Buffer_getset,
    .tp_init = (initproc)Buffer_init,
    .tp_new = PyType_GenericNew,
};

/* -- Recorder --------------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    Buffer *received;     /* d: time.time() at recording */
    Buffer *publisher;    /* I: row of the table of publishers */
    Buffer *qos;          /* B */
    Buffer *retain;       /* B: 0 or 1 */
    Buffer *payload;      /* B: every payload, back to back */
    Buffer *payload_size; /* I */
    Buffer *topic;        /* B: every topic as UTF-8, back to back */
    Buffer *topic_size;   /* I */
    PyObject *properties; /* dict: row -> the message's properties, for the few that have any */
    PyObject *rows;       /* dict: Origin -> row (the Python table's own dict) */
    PyObject *new_row;    /* callable(m) -> row, for a message whose publisher has no row yet */
    PyObject *on_full;    /* callable() or None: called once, when `limit` rows are recorded */
    Py_ssize_t limit;
} Recorder;

static PyObject *str_origin, *str_properties, *str_topic, *str_qos, *str_retain, *str_payload;

/* -- A message's attributes --------------------------------------------------------------------
 *
 * `Message` is a slotted dataclass: each field is a member descriptor reading the object at a
 * fixed offset. PyObject_GetAttr finds that descriptor through the type every time (about 160
 * instructions, measured with callgrind: a third of the journey's recorder); reading the slot at
 * its offset is one load. The offsets are learned from the first message's type and used only for
 * objects of exactly that type while the type is unchanged (its version tag, which any assignment
 * to the class resets); anything else, and a slot not set, goes through PyObject_GetAttr. */

enum { A_ORIGIN, A_PROPERTIES, A_TOPIC, A_QOS, A_RETAIN, A_PAYLOAD, N_ATTRS };
static PyObject **attr_names[N_ATTRS] = {&str_origin, &str_properties, &str_topic,
                                         &str_qos, &str_retain, &str_payload};
static PyTypeObject *slots_type;            /* the type learned (a strong reference) */
static unsigned int slots_version;          /* its version tag then */
static Py_ssize_t slots_offset[N_ATTRS];    /* each attribute's slot, -1 where not a slot */

static void
learn_slots(PyTypeObject *type)
{
    Py_ssize_t offsets[N_ATTRS];
    for (int i = 0; i < N_ATTRS; i++) {
        PyObject *descr = _PyType_Lookup(type, *attr_names[i]); /* borrowed; sets the tag */
        offsets[i] = -1;
        if (descr != NULL && Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
            PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
            if (member->type == T_OBJECT_EX)
                offsets[i] = member->offset;
        }
    }
    if (!PyType_HasFeature(type, Py_TPFLAGS_VALID_VERSION_TAG))
        return; /* no tag to tell a later change by: always PyObject_GetAttr */
    Py_INCREF(type);
    Py_XSETREF(slots_type, type);
    slots_version = type->tp_version_tag;
    memcpy(slots_offset, offsets, sizeof offsets);
}

/* `m.<attribute i>` as a new reference (NULL with an exception, as PyObject_GetAttr). */
static inline PyObject *
message_attr(PyObject *m, int i)
{
    PyTypeObject *type = Py_TYPE(m);
    if (type == slots_type && PyType_HasFeature(type, Py_TPFLAGS_VALID_VERSION_TAG) &&
        type->tp_version_tag == slots_version) {
        if (slots_offset[i] >= 0) {
            PyObject *value = *(PyObject **)((char *)m + slots_offset[i]);
            if (value != NULL)
                return Py_NewRef(value);
        }
    }
    else if (slots_type == NULL || type == slots_type) {
        learn_slots(type); /* the first message, or its type changed: learned for the next */
    }
    return PyObject_GetAttr(m, *attr_names[i]);
}

/* Appending to a column whose room `buffer_reserve` made. */
#define PUT(buffer, item, n)                                                                      \
    do {                                                                                          \
        memcpy((buffer)->data + (buffer)->size, (item), (size_t)(n));                             \
        (buffer)->size += (n);                                                                    \
    } while (0)

static int
Recorder_traverse(Recorder *self, visitproc visit, void *arg)
{
    Py_VISIT(self->received);
    Py_VISIT(self->publisher);
    Py_VISIT(self->qos);
    Py_VISIT(self->retain);
    Py_VISIT(self->payload);
    Py_VISIT(self->payload_size);
    Py_VISIT(self->topic);
    Py_VISIT(self->topic_size);
    Py_VISIT(self->properties);
    Py_VISIT(self->rows);
    Py_VISIT(self->new_row);
    Py_VISIT(self->on_full);
    return 0;
}

static int
Recorder_clear(Recorder *self)
{
    Py_CLEAR(self->received);
    Py_CLEAR(self->publisher);
    Py_CLEAR(self->qos);
    Py_CLEAR(self->retain);
    Py_CLEAR(self->payload);
    Py_CLEAR(self->payload_size);
    Py_CLEAR(self->topic);
    Py_CLEAR(self->topic_size);
    Py_CLEAR(self->properties);
    Py_CLEAR(self->rows);
    Py_CLEAR(self->new_row);
    Py_CLEAR(self->on_full);
    return 0;
}

static void
Recorder_dealloc(Recorder *self)
{
    PyObject_GC_UnTrack(self);
    Recorder_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
check_buffer(PyObject *obj, const char *name, char format)
{
    if (!PyObject_TypeCheck(obj, &BufferType) || ((Buffer *)obj)->format[0] != format) {
        PyErr_Format(PyExc_TypeError, "%s must be a Buffer(%c)", name, format);
        return -1;
    }
    return 0;
}

static int
Recorder_init(Recorder *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"received", "publisher", "qos", "retain", "payload", "payload_size",
                             "topic", "topic_size", "properties", "rows", "new_row", "limit",
                             "on_full", NULL};
    PyObject *received, *publisher, *qos, *retain, *payload, *payload_size, *topic, *topic_size;
    PyObject *properties, *rows, *new_row, *on_full = Py_None;
    Py_ssize_t limit = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOOOOO!O!O|nO", kwlist, &received,
                                     &publisher, &qos, &retain, &payload, &payload_size, &topic,
                                     &topic_size, &PyDict_Type, &properties, &PyDict_Type, &rows,
                                     &new_row, &limit, &on_full))
        return -1;
    if (check_buffer(received, "received", 'd') < 0 ||
        check_buffer(publisher, "publisher", 'I') < 0 || check_buffer(qos, "qos", 'B') < 0 ||
        check_buffer(retain, "retain", 'B') < 0 || check_buffer(payload, "payload", 'B') < 0 ||
        check_buffer(payload_size, "payload_size", 'I') < 0 ||
        check_buffer(topic, "topic", 'B') < 0 || check_buffer(topic_size, "topic_size", 'I') < 0)
        return -1;
    if (!PyCallable_Check(new_row) || (on_full != Py_None && !PyCallable_Check(on_full))) {
        PyErr_SetString(PyExc_TypeError, "new_row (and on_full, unless None) must be callable");
        return -1;
    }
    self->limit = limit;
#define SET(field, value) do { Py_INCREF(value); Py_XSETREF(self->field, (void *)(value)); } while (0)
    SET(received, received);
    SET(publisher, publisher);
    SET(qos, qos);
    SET(retain, retain);
    SET(payload, payload);
    SET(payload_size, payload_size);
    SET(topic, topic);
    SET(topic_size, topic_size);
    SET(properties, properties);
    SET(rows, rows);
    SET(new_row, new_row);
    SET(on_full, on_full);
#undef SET
    return 0;
}

static double
wall_clock(void)
{
    /* time.time(): CLOCK_REALTIME in seconds, as a double */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int
small_uint(PyObject *obj, uint32_t *out, const char *name)
{
    if (obj == Py_None) {
        *out = 0;
        return 0;
    }
    unsigned long value = PyLong_AsUnsignedLong(obj);
    if (value == (unsigned long)-1 && PyErr_Occurred())
        return -1;
    if (value > UINT32_MAX) {
        PyErr_Format(PyExc_OverflowError, "%s out of range", name);
        return -1;
    }
    *out = (uint32_t)value;
    return 0;
}

/* The publisher's row: the origin's, else made by Python (first message of a connection in the
 * batch, or a message without an origin, keyed by its values). None is never a key. */
static int
publisher_row(PyObject *rows, PyObject *new_row, PyObject *origin, PyObject *m, uint32_t *row)
{
    PyObject *row_obj = origin == Py_None ? NULL : PyDict_GetItemWithError(rows, origin);
    if (row_obj != NULL) {
        Py_INCREF(row_obj);
    }
    else {
        if (PyErr_Occurred())
            return -1;
        if ((row_obj = PyObject_CallOneArg(new_row, m)) == NULL)
            return -1;
    }
    int failed = small_uint(row_obj, row, "publisher row");
    Py_DECREF(row_obj);
    return failed;
}

static PyObject *
record(Recorder *self, PyObject *m, double received)
{
    /* Every attribute is read before anything is appended: a message missing one (a bug upstream)
     * raises and leaves the columns as they were, all the same length. */
    PyObject *origin = NULL, *props = NULL, *topic = NULL, *qos_obj = NULL, *retain_obj = NULL;
    PyObject *payload = NULL, *topic_bytes = NULL;
    Py_buffer view = {0};
    int have_view = 0;
    PyObject *result = NULL;

    if ((origin = message_attr(m, A_ORIGIN)) == NULL)
        goto done;
    if ((props = message_attr(m, A_PROPERTIES)) == NULL)
        goto done;
    if ((topic = message_attr(m, A_TOPIC)) == NULL)
        goto done;
    if ((qos_obj = message_attr(m, A_QOS)) == NULL)
        goto done;
    if ((retain_obj = message_attr(m, A_RETAIN)) == NULL)
        goto done;
    if ((payload = message_attr(m, A_PAYLOAD)) == NULL)
        goto done;

    long qos = PyLong_AsLong(qos_obj);
    if (qos == -1 && PyErr_Occurred())
        goto done;
    if (qos < 0 || qos > 2) {
        PyErr_Format(PyExc_ValueError, "qos %ld is not 0, 1 or 2", qos);
        goto done;
    }
    int retain = PyObject_IsTrue(retain_obj);
    if (retain < 0)
        goto done;
    int has_props = PyObject_IsTrue(props);
    if (has_props < 0)
        goto done;

    /* The topic as UTF-8: for the ASCII topics of nearly every device, the string's own bytes. A
     * topic that cannot be encoded (a lone surrogate; the codec never decodes one) is kept with
     * replacement characters rather than failing the publish. */
    if (!PyUnicode_Check(topic)) {
        PyErr_Format(PyExc_TypeError, "topic must be str, not %.100s", Py_TYPE(topic)->tp_name);
        goto done;
    }
    Py_ssize_t topic_len;
    const char *topic_utf8 = PyUnicode_AsUTF8AndSize(topic, &topic_len);
    if (topic_utf8 == NULL) {
        PyErr_Clear();
        if ((topic_bytes = PyUnicode_AsEncodedString(topic, "utf-8", "replace")) == NULL)
            goto done;
        topic_utf8 = PyBytes_AS_STRING(topic_bytes);
        topic_len = PyBytes_GET_SIZE(topic_bytes);
    }

    const char *bytes;
    Py_ssize_t size;
    if (PyBytes_CheckExact(payload)) {
        bytes = PyBytes_AS_STRING(payload);
        size = PyBytes_GET_SIZE(payload);
    }
    else {
        if (PyObject_GetBuffer(payload, &view, PyBUF_SIMPLE) < 0)
            goto done;
        have_view = 1;
        bytes = view.buf;
        size = view.len;
    }
    if ((size_t)size > UINT32_MAX || (size_t)topic_len > UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "payload or topic larger than 4 GiB");
        goto done;
    }

    uint32_t row;
    if (publisher_row(self->rows, self->new_row, origin, m, &row) < 0)
        goto done;

    /* Room first, so that no column grows and then another fails: all or nothing. */
    Py_ssize_t index = self->payload_size->size / (Py_ssize_t)sizeof(uint32_t);
    if (buffer_reserve(self->received, sizeof(double)) < 0 ||
        buffer_reserve(self->publisher, sizeof(uint32_t)) < 0 ||
        buffer_reserve(self->qos, 1) < 0 || buffer_reserve(self->retain, 1) < 0 ||
        buffer_reserve(self->payload, size) < 0 ||
        buffer_reserve(self->payload_size, sizeof(uint32_t)) < 0 ||
        buffer_reserve(self->topic, topic_len) < 0 ||
        buffer_reserve(self->topic_size, sizeof(uint32_t)) < 0)
        goto done;
    if (has_props) {
        PyObject *key = PyLong_FromSsize_t(index);
        if (key == NULL)
            goto done;
        int failed = PyDict_SetItem(self->properties, key, props);
        Py_DECREF(key);
        if (failed < 0)
            goto done;
    }
    uint8_t qos_byte = (uint8_t)qos, retain_byte = (uint8_t)retain;
    uint32_t size32 = (uint32_t)size, topic32 = (uint32_t)topic_len;
    PUT(self->publisher, &row, sizeof row);
    PUT(self->received, &received, sizeof received);
    PUT(self->qos, &qos_byte, 1);
    PUT(self->retain, &retain_byte, 1);
    PUT(self->payload, bytes, size);
    PUT(self->payload_size, &size32, sizeof size32);
    PUT(self->topic, topic_utf8, topic_len);
    PUT(self->topic_size, &topic32, sizeof topic32);
    if (index + 1 == self->limit && self->on_full != Py_None) {
        /* The batch is full: the tap hands it over now rather than at its next tick, which a
         * busy loop delays (one loop iteration can route 25,000 messages). Whatever it does,
         * this message is recorded; its error is reported, never raised into the publish. */
        PyObject *r = PyObject_CallNoArgs(self->on_full);
        if (r == NULL)
            PyErr_WriteUnraisable(self->on_full);
        Py_XDECREF(r);
    }
    result = Py_None;
    Py_INCREF(result);

done:
    if (have_view)
        PyBuffer_Release(&view);
    Py_XDECREF(origin);
    Py_XDECREF(props);
    Py_XDECREF(topic);
    Py_XDECREF(qos_obj);
    Py_XDECREF(retain_obj);
    Py_XDECREF(payload);
    Py_XDECREF(topic_bytes);
    return result;
}

static PyObject *
Recorder_record(Recorder *self, PyObject *m)
{
    return record(self, m, wall_clock());
}

static PyObject *
Recorder_record_at(Recorder *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "record_at(message, received)");
        return NULL;
    }
    double received = PyFloat_AsDouble(args[1]);
    if (received == -1.0 && PyErr_Occurred())
        return NULL;
    return record(self, args[0], received);
}

static PyMethodDef Recorder_methods[] = {
    {"record", (PyCFunction)Recorder_record, METH_O,
     "Record a routed message, received now (the broker's Archive port)."},
    {"record_at", (PyCFunction)(void (*)(void))Recorder_record_at, METH_FASTCALL,
     "Record a message with the given received time (time.time() seconds)."},
    {NULL},
};

static PyTypeObject RecorderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "data_plane.storage._recorder.Recorder",
    .tp_basicsize = sizeof(Recorder),
    .tp_dealloc = (destructor)Recorder_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Records routed messages into a batch's columns.",
    .tp_traverse = (traverseproc)Recorder_traverse,
    .tp_clear = (inquiry)Recorder_clear,
    .tp_methods = Recorder_methods,
    .tp_init = (initproc)Recorder_init,
    .tp_new = PyType_GenericNew,
};

/* -- Outcomes: the journey's recorder ---------------------------------------------------------
 *
 * `data_plane.observability.journey` records one row per routed PUBLISH: who (a row of the Python
 * table of publishers, as above), when, the topic (UTF-8, back to back), QoS, payload size, the
 * publisher's packet id, and from the broker's `Published` the sessions reached and how many of
 * them queued it offline. No payload is copied. `record(m, packet_id, published)`. */

typedef struct {
    PyObject_HEAD
    Buffer *received;   /* d */
    Buffer *publisher;  /* I */
    Buffer *qos;        /* B */
    Buffer *size;       /* I: payload bytes */
    Buffer *packet_id;  /* I: 0 for none */
    Buffer *sessions;   /* I */
    Buffer *queued;     /* I */
    Buffer *topic;      /* B */
    Buffer *topic_size; /* I */
    PyObject *rows;     /* dict: Origin -> row */
    PyObject *new_row;  /* callable(m) -> row */
    /* The last message's origin and its row: a connection's publishes come in runs (one read
     * holds many), so most messages skip the dict. An origin's row never changes in a batch. */
    PyObject *last_origin;
    uint32_t last_row;
} Outcomes;

static int
Outcomes_traverse(Outcomes *self, visitproc visit, void *arg)
{
    Py_VISIT(self->received);
    Py_VISIT(self->publisher);
    Py_VISIT(self->qos);
    Py_VISIT(self->size);
    Py_VISIT(self->packet_id);
    Py_VISIT(self->sessions);
    Py_VISIT(self->queued);
    Py_VISIT(self->topic);
    Py_VISIT(self->topic_size);
    Py_VISIT(self->rows);
    Py_VISIT(self->new_row);
    Py_VISIT(self->last_origin);
    return 0;
}

static int
Outcomes_clear(Outcomes *self)
{
    Py_CLEAR(self->received);
    Py_CLEAR(self->publisher);
    Py_CLEAR(self->qos);
    Py_CLEAR(self->size);
    Py_CLEAR(self->packet_id);
    Py_CLEAR(self->sessions);
    Py_CLEAR(self->queued);
    Py_CLEAR(self->topic);
    Py_CLEAR(self->topic_size);
    Py_CLEAR(self->rows);
    Py_CLEAR(self->new_row);
    Py_CLEAR(self->last_origin);
    return 0;
}

static void
Outcomes_dealloc(Outcomes *self)
{
    PyObject_GC_UnTrack(self);
    Outcomes_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
Outcomes_init(Outcomes *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"received", "publisher", "qos", "size", "packet_id", "sessions",
                             "queued", "topic", "topic_size", "rows", "new_row", NULL};
    PyObject *received, *publisher, *qos, *size, *packet_id, *sessions, *queued, *topic;
    PyObject *topic_size, *rows, *new_row;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOOOOOO!O", kwlist, &received, &publisher,
                                     &qos, &size, &packet_id, &sessions, &queued, &topic,
                                     &topic_size, &PyDict_Type, &rows, &new_row))
        return -1;
    if (check_buffer(received, "received", 'd') < 0 ||
        check_buffer(publisher, "publisher", 'I') < 0 || check_buffer(qos, "qos", 'B') < 0 ||
        check_buffer(size, "size", 'I') < 0 || check_buffer(packet_id, "packet_id", 'I') < 0 ||
        check_buffer(sessions, "sessions", 'I') < 0 || check_buffer(queued, "queued", 'I') < 0 ||
        check_buffer(topic, "topic", 'B') < 0 || check_buffer(topic_size, "topic_size", 'I') < 0)
        return -1;
    if (!PyCallable_Check(new_row)) {
        PyErr_SetString(PyExc_TypeError, "new_row must be callable");
        return -1;
    }
#define SET(field, value) do { Py_INCREF(value); Py_XSETREF(self->field, (void *)(value)); } while (0)
    SET(received, received);
    SET(publisher, publisher);
    SET(qos, qos);
    SET(size, size);
    SET(packet_id, packet_id);
    SET(sessions, sessions);
    SET(queued, queued);
    SET(topic, topic);
    SET(topic_size, topic_size);
    SET(rows, rows);
    SET(new_row, new_row);
#undef SET
    return 0;
}

static PyObject *
Outcomes_record(Outcomes *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyTuple_Check(args[2]) || PyTuple_GET_SIZE(args[2]) < 4) {
        PyErr_SetString(PyExc_TypeError, "record(message, packet_id, published)");
        return NULL;
    }
    PyObject *m = args[0], *published = args[2];
    PyObject *origin = NULL, *topic = NULL, *qos_obj = NULL, *payload = NULL;
    PyObject *topic_bytes = NULL, *result = NULL;
    Py_buffer view = {0};
    int have_view = 0;
    uint32_t packet_id, sessions, queued, row;

    if (small_uint(args[1], &packet_id, "packet_id") < 0 ||
        small_uint(PyTuple_GET_ITEM(published, 0), &sessions, "reached") < 0 ||
        small_uint(PyTuple_GET_ITEM(published, 3), &queued, "queued") < 0)
        return NULL;
    if ((origin = message_attr(m, A_ORIGIN)) == NULL ||
        (topic = message_attr(m, A_TOPIC)) == NULL ||
        (qos_obj = message_attr(m, A_QOS)) == NULL ||
        (payload = message_attr(m, A_PAYLOAD)) == NULL)
        goto done;
    long qos = PyLong_AsLong(qos_obj);
    if (qos == -1 && PyErr_Occurred())
        goto done;
    if (qos < 0 || qos > 2) {
        PyErr_Format(PyExc_ValueError, "qos %ld is not 0, 1 or 2", qos);
        goto done;
    }
    if (!PyUnicode_Check(topic)) {
        PyErr_Format(PyExc_TypeError, "topic must be str, not %.100s", Py_TYPE(topic)->tp_name);
        goto done;
    }
    Py_ssize_t topic_len;
    const char *topic_utf8 = PyUnicode_AsUTF8AndSize(topic, &topic_len);
    if (topic_utf8 == NULL) {
        PyErr_Clear();
        if ((topic_bytes = PyUnicode_AsEncodedString(topic, "utf-8", "replace")) == NULL)
            goto done;
        topic_utf8 = PyBytes_AS_STRING(topic_bytes);
        topic_len = PyBytes_GET_SIZE(topic_bytes);
    }
    Py_ssize_t size;
    if (PyBytes_CheckExact(payload)) {
        size = PyBytes_GET_SIZE(payload);
    }
    else {
        if (PyObject_GetBuffer(payload, &view, PyBUF_SIMPLE) < 0)
            goto done;
        have_view = 1;
        size = view.len;
    }
    if ((size_t)size > UINT32_MAX || (size_t)topic_len > UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "payload or topic larger than 4 GiB");
        goto done;
    }
    if (origin != Py_None && origin == self->last_origin) {
        row = self->last_row;
    }
    else {
        if (publisher_row(self->rows, self->new_row, origin, m, &row) < 0)
            goto done;
        if (origin != Py_None) {
            Py_XSETREF(self->last_origin, Py_NewRef(origin));
            self->last_row = row;
        }
    }
    if (buffer_reserve(self->received, sizeof(double)) < 0 ||
        buffer_reserve(self->publisher, sizeof(uint32_t)) < 0 ||
        buffer_reserve(self->qos, 1) < 0 || buffer_reserve(self->size, sizeof(uint32_t)) < 0 ||
        buffer_reserve(self->packet_id, sizeof(uint32_t)) < 0 ||
        buffer_reserve(self->sessions, sizeof(uint32_t)) < 0 ||
        buffer_reserve(self->queued, sizeof(uint32_t)) < 0 ||
        buffer_reserve(self->topic, topic_len) < 0 ||
        buffer_reserve(self->topic_size, sizeof(uint32_t)) < 0)
        goto done;
    double received = wall_clock();
    uint8_t qos_byte = (uint8_t)qos;
    uint32_t size32 = (uint32_t)size, topic32 = (uint32_t)topic_len;
    PUT(self->received, &received, sizeof received);
    PUT(self->publisher, &row, sizeof row);
    PUT(self->qos, &qos_byte, 1);
    PUT(self->size, &size32, sizeof size32);
    PUT(self->packet_id, &packet_id, sizeof packet_id);
    PUT(self->sessions, &sessions, sizeof sessions);
    PUT(self->queued, &queued, sizeof queued);
    PUT(self->topic, topic_utf8, topic_len);
    PUT(self->topic_size, &topic32, sizeof topic32);
    result = Py_None;
    Py_INCREF(result);

done:
    if (have_view)
        PyBuffer_Release(&view);
    Py_XDECREF(origin);
    Py_XDECREF(topic);
    Py_XDECREF(qos_obj);
    Py_XDECREF(payload);
    Py_XDECREF(topic_bytes);
    return result;
}

static PyMethodDef Outcomes_methods[] = {
    {"record", (PyCFunction)(void (*)(void))Outcomes_record, METH_FASTCALL,
     "Record a routed PUBLISH's outcome: record(message, packet_id, published)."},
    {NULL},
};

static PyTypeObject OutcomesType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "data_plane.storage._recorder.Outcomes",
    .tp_basicsize = sizeof(Outcomes),
    .tp_dealloc = (destructor)Outcomes_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Records routed publishes' outcomes into a batch's columns (the journey).",
    .tp_traverse = (traverseproc)Outcomes_traverse,
    .tp_clear = (inquiry)Outcomes_clear,
    .tp_methods = Outcomes_methods,
    .tp_init = (initproc)Outcomes_init,
    .tp_new = PyType_GenericNew,
};

/* -- module ----------------------------------------------------------------------------------- */

static struct PyModuleDef recorder_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "data_plane.storage._recorder",
    .m_doc = "The archive's recorder in C (see parquet_archive.PublishColumns).",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__recorder(void)
{
    if (PyType_Ready(&BufferType) < 0 || PyType_Ready(&RecorderType) < 0 ||
        PyType_Ready(&OutcomesType) < 0)
        return NULL;
#define INTERN(var, text) if ((var = PyUnicode_InternFromString(text)) == NULL) return NULL
    INTERN(str_origin, "origin");
    INTERN(str_properties, "properties");
    INTERN(str_topic, "topic");
    INTERN(str_qos, "qos");
    INTERN(str_retain, "retain");
    INTERN(str_payload, "payload");
#undef INTERN
    PyObject *module = PyModule_Create(&recorder_module);
    if (module == NULL)
        return NULL;
    Py_INCREF(&BufferType);
    if (PyModule_AddObject(module, "Buffer", (PyObject *)&BufferType) < 0) {
        Py_DECREF(&BufferType);
        Py_DECREF(module);
        return NULL;
    }
    Py_INCREF(&RecorderType);
    if (PyModule_AddObject(module, "Recorder", (PyObject *)&RecorderType) < 0) {
        Py_DECREF(&RecorderType);
        Py_DECREF(module);
        return NULL;
    }
    Py_INCREF(&OutcomesType);
    if (PyModule_AddObject(module, "Outcomes", (PyObject *)&OutcomesType) < 0) {
        Py_DECREF(&OutcomesType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
