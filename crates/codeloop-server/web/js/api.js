// The documented HTTP API (GET /doc), as any client uses it: JSON in and out, the bearer token in the
// Authorization header (never in a query string), the server's own error message surfaced.

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export class Api {
  constructor(token) {
    this.token = token || null;
  }

  headers(extra = {}) {
    const headers = {...extra};
    if (this.token) headers.Authorization = `Bearer ${this.token}`;
    return headers;
  }

  async request(method, path, body, query) {
    const init = {method, headers: this.headers(), cache: 'no-store', credentials: 'omit'};
    if (body !== undefined) {
      init.headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    return this.read(fetch(withQuery(path, query), init));
  }

  /** The JSON of a response (a fetch already under way), or the server's error. */
  async read(pending) {
    let response;
    try {
      response = await pending;
    } catch (e) {
      throw new ApiError(0, 'network', `cannot reach the codeloop server (${e.message})`);
    }
    const text = await response.text();
    let data = null;
    if (text) {
      try {
        data = JSON.parse(text);
      } catch {
        data = text;
      }
    }
    if (!response.ok) {
      const error = data && typeof data === 'object' ? data.error : null;
      throw new ApiError(
        response.status,
        error?.code ?? `http_${response.status}`,
        error?.message ?? `the server answered ${response.status}`,
      );
    }
    return data;
  }

  get(path, query) {
    return this.request('GET', path, undefined, query);
  }

  post(path, body = {}) {
    return this.request('POST', path, body);
  }

  patch(path, body) {
    return this.request('PATCH', path, body);
  }

  del(path) {
    return this.request('DELETE', path);
  }
}

/** `path?k=v` for the defined values of `query`. */
export function withQuery(path, query) {
  if (!query) return path;
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(query)) {
    if (value !== undefined && value !== null && value !== '') params.set(key, String(value));
  }
  const text = params.toString();
  return text ? `${path}?${text}` : path;
}

/** An id as a path segment. */
export function seg(id) {
  return encodeURIComponent(String(id));
}
