"""Error answers of real OpenAI-compatible providers, byte for byte, for the fake server to replay."""

from __future__ import annotations

#: Error answers of real providers, exactly as they send them: name -> (status, headers, body).
#: Sources: the servers' code (vLLM, llama.cpp server, Ollama, SGLang) and the providers' error docs and
#: bug reports quoting live answers. ``expect`` in tests/agent/test_llm.py says what each must become.
PROVIDER_ERRORS: dict[str, tuple[int, dict[str, str], str]] = {
    # --- context overflow ---
    "openai_overflow": (400, {}, '{\n  "error": {\n    "message": "This model\'s maximum context length is 128000 '
                        'tokens. However, your messages resulted in 130775 tokens. Please reduce the length of the '
                        'messages.",\n    "type": "invalid_request_error",\n    "param": "messages",\n    "code": '
                        '"context_length_exceeded"\n  }\n}'),
    "openai_overflow_new": (400, {}, '{"error": {"message": "Your input exceeds the context window of this model. '
                            'Please adjust your input and try again.", "type": "invalid_request_error", "param": '
                            '"input", "code": "context_length_exceeded"}}'),
    "azure_overflow": (400, {}, '{"error": {"message": "This model\'s maximum context length is 8192 tokens. However, '
                       'your messages resulted in 9102 tokens. Please reduce the length of the messages.", "type": '
                       '"invalid_request_error", "param": "messages", "code": "context_length_exceeded", "status": '
                       '400}}'),
    "deepseek_overflow": (400, {}, '{"error":{"message":"This model\'s maximum context length is 65536 tokens. '
                          'However, you requested 70321 tokens (70321 in the messages, 0 in the completion). Please '
                          'reduce the length of the messages or completion.","type":"invalid_request_error","param":'
                          'null,"code":"invalid_request_error"}}'),
    "vllm_overflow": (400, {}, '{"object":"error","message":"This model\'s maximum context length is 4096 tokens. '
                      'However, you requested 5000 tokens (4488 in the messages, 512 in the completion). Please '
                      'reduce the length of the messages or completion.","type":"BadRequestError","param":null,'
                      '"code":400}'),
    "vllm_overflow_new": (400, {}, '{"error":{"message":"This model\'s maximum context length is 2048 tokens. '
                          'However, your request has 2301 input tokens. Please reduce the length of the input '
                          'messages.","type":"BadRequestError","param":null,"code":400}}'),
    "llamacpp_overflow": (400, {}, '{"error":{"code":400,"message":"request (600 tokens) exceeds the available '
                          'context size (512 tokens), try increasing it","type":"exceed_context_size_error",'
                          '"n_prompt_tokens":600,"n_ctx":512}}'),
    "ollama_overflow": (400, {}, '{"error":{"message":"the prompt is longer than the context length currently '
                        'available to the model","type":"api_error","param":null,"code":null}}'),
    "sglang_overflow": (400, {}, '{"object":"error","message":"The input (5017 tokens) is longer than the model\'s '
                        'context length (4096 tokens).","type":"BadRequestError","param":null,"code":400}'),
    "lmstudio_overflow": (400, {}, '{"error":"Trying to keep the first 10136 tokens when context the overflows. '
                          'However, the model is loaded with context length of only 7866 tokens, which is not enough. '
                          'Try to load the model with a larger context length, or provide a shorter input"}'),
    "openrouter_overflow": (400, {}, '{"error":{"message":"This endpoint\'s maximum context length is 131072 tokens. '
                            'However, you requested about 190512 tokens (190512 of text input). Please reduce the '
                            'length of either one, or use the \\"middle-out\\" transform to compress your prompt '
                            'automatically.","code":400,"metadata":{"provider_name":null}}}'),
    "openrouter_nested_overflow": (400, {}, '{"error":{"message":"Provider returned error","code":400,"metadata":'
                                   '{"raw":"{\\"type\\":\\"error\\",\\"error\\":{\\"type\\":\\"invalid_request_error'
                                   '\\",\\"message\\":\\"prompt is too long: 210631 tokens > 200000 maximum\\"}}",'
                                   '"provider_name":"Anthropic"}},"user_id":"user_2abc"}'),
    "groq_overflow": (400, {}, '{"error":{"message":"Please reduce the length of the messages or completion.",'
                      '"type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}'),
    "together_overflow": (400, {}, '{"id":"8f2c-abc","error":{"message":"Input validation error: `inputs` tokens + '
                          '`max_new_tokens` must be <= 8193. Given: 9000 `inputs` tokens and 512 `max_new_tokens`",'
                          '"type":"invalid_request_error","param":"max_tokens","code":null}}'),
    "gemini_overflow": (400, {}, '[{\n  "error": {\n    "code": 400,\n    "message": "The input token count '
                        '(1287603) exceeds the maximum number of tokens allowed (1048576).",\n    "status": '
                        '"INVALID_ARGUMENT"\n  }\n}\n]'),
    "anthropic_overflow": (400, {}, '{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too '
                           'long: 210631 tokens > 200000 maximum"},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}'),
    "dashscope_overflow": (400, {}, '{"error":{"code":"invalid_parameter_error","param":null,"message":"<400> '
                           'InternalError.Algo.InvalidParameter: Range of input length should be [1, 129024]",'
                           '"type":"invalid_request_error"},"id":"chatcmpl-5d1b","request_id":"5d1b-9f"}'),
    "moonshot_overflow": (400, {}, '{"error":{"message":"Invalid request: Your request exceeded model token limit: '
                          '8192","type":"invalid_request_error"}}'),
    "zhipu_overflow": (400, {}, '{"error":{"code":"1261","message":"Prompt exceeds max length"}}'),
    "siliconflow_overflow": (400, {}, '{"code":20015,"message":"length of prompt_tokens (68957) must be less than '
                             'max_seq_len (65536).","data":null}'),
    # The six of issue 33, from the servers' sources and the answers quoted in their bug trackers.
    "vllm_engine_overflow": (400, {}, '{"error":{"message":"The decoder prompt (length 2301) is longer than the '
                             'maximum model length of 2048. Make sure that `max_model_len` is no smaller than the '
                             'number of text tokens.","type":"BadRequestError","param":null,"code":400}}'),
    "vllm_passed_overflow": (400, {}, '{"error":{"message":"You passed 2101 input tokens and requested 0 output '
                             'tokens. However, the model\'s context length is only 2048 tokens, resulting in a '
                             'maximum input length of 2048 tokens. Please reduce the length of the input prompt.",'
                             '"type":"BadRequestError","param":"input_tokens","code":400}}'),
    "ollama_012_overflow": (400, {}, '{"error":{"message":"prompt too long; exceeded max context length by 4 tokens",'
                            '"type":"api_error","param":null,"code":null}}'),
    "ollama_native_overflow": (400, {}, '{"error":"the input length exceeds the context length"}'),
    "sglang_requested_overflow": (400, {}, '{"object":"error","message":"Requested token count exceeds the model\'s '
                                  'maximum context length of 4096 tokens. You requested a total of 5120 tokens: 4096 '
                                  'tokens from the input messages and 1024 tokens for the completion. Please reduce '
                                  'the number of tokens in the input messages or the completion to fit within the '
                                  'limit.","type":"BadRequestError","param":null,"code":400}'),
    "sglang_value_error": (400, {}, '{"error":{"message":"The input (36000 tokens) is longer than the model\'s '
                           'context length (32768 tokens).","type":"ValueError"}}'),
    # SGLang's tokenizer manager raises ValueError(f"The input ({n} tokens) is longer than the model's context length
    # ({context_len} tokens).") and serving_base.create_error_response answers it as its OpenAI-style ErrorResponse
    # through ORJSONResponse (compact), HTTP 400; in a stream the same object comes as data: {"error": ...}
    # (create_streaming_error_response, json.dumps): SGLANG_STREAM_OVERFLOW below. The message of issue 40.
    "sglang_input_overflow": (400, {}, '{"object":"error","message":"The input (150 tokens) is longer than the '
                              'model\'s context length (100 tokens).","type":"BadRequestError","param":null,'
                              '"code":400}'),
    "lmstudio_n_keep": (400, {}, '{"error":"Cannot truncate prompt with n_keep (15028) >= n_ctx (7424)"}'),
    "lmstudio_mid_generation": (400, {}, '{"error":"Reached context length of 4096 tokens with model (arch: '
                                'qwen3vlmoe) that does not currently support mid-generation context overflow. Try '
                                'reloading with a larger context length or shortening the prompt/chat."}'),
    "anthropic_compat_overflow": (400, {}, '{"type":"error","error":{"type":"invalid_request_error","message":"input '
                                  'length and `max_tokens` exceed context limit: 199759 + 8192 > 200000, decrease '
                                  'input length or `max_tokens` and try again"},"request_id":"req_011CUB2X"}'),
    "nginx_413": (413, {"Content-Type": "text/html"}, '<html>\r\n<head><title>413 Request Entity Too Large</title>'
                  '</head>\r\n<body>\r\n<center><h1>413 Request Entity Too Large</h1></center>\r\n<hr><center>'
                  'nginx</center>\r\n</body>\r\n</html>\r\n'),
    # --- a base URL without /v1: the path itself is unknown ---
    "llamacpp_404": (404, {}, '{"error":{"code":404,"message":"File Not Found","type":"not_found_error"}}'),
    "ollama_404": (404, {"Content-Type": "text/plain"}, "404 page not found"),
    "vllm_404": (404, {}, '{"detail":"Not Found"}'),
    "lmstudio_bad_endpoint": (200, {}, '{"error":"Unexpected endpoint or method. (POST /chat/completions)"}'),
    # --- rate limits (never an overflow, also when they say "Request too large") ---
    "openai_tpm": (429, {"retry-after-ms": "120", "x-ratelimit-reset-tokens": "1s"},
                   '{"error":{"message":"Request too large for gpt-4o in organization org-abc on tokens per min '
                   '(TPM): Limit 30000, Requested 50126. The input or output tokens must be reduced in order to run '
                   'successfully. Visit https://platform.openai.com/account/rate-limits to learn more.","type":'
                   '"tokens","param":null,"code":"rate_limit_exceeded"}}'),
    "groq_tpm": (413, {"retry-after": "0"}, '{"error":{"message":"Request too large for model `llama-3.1-8b-instant` '
                 'in organization `org_01abc` service tier `on_demand` on tokens per minute (TPM): Limit 6000, '
                 'Requested 9525, please reduce your message size and try again. Need more tokens? Visit '
                 'https://groq.com/self-serve-support/ to request higher limits.","type":"tokens","code":'
                 '"rate_limit_exceeded"}}'),
    "azure_rate": (429, {"retry-after": "0"}, '{"error":{"code":"429","message":"Requests to the '
                   'ChatCompletions_Create Operation under Azure OpenAI API version 2024-10-21 have exceeded '
                   'token rate limit of your current '
                   'OpenAI S0 pricing tier. Please retry after 1 second."}}'),
    "gemini_rate": (429, {}, '[{\n  "error": {\n    "code": 429,\n    "message": "You exceeded your current quota, '
                    'please check your plan and billing details.",\n    "status": "RESOURCE_EXHAUSTED",\n    '
                    '"details": [\n      {\n        "@type": "type.googleapis.com/google.rpc.RetryInfo",\n        '
                    '"retryDelay": "0.2s"\n      }\n    ]\n  }\n}\n]'),
    "openrouter_upstream_rate": (429, {}, '{"error":{"message":"Provider returned error","code":429,"metadata":{"raw":'
                                 '"z-ai/glm-4.6 is temporarily rate-limited upstream. Please retry shortly.",'
                                 '"provider_name":"BaseTen"}}}'),
    "anthropic_overloaded": (529, {}, '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'),
    # --- quota and billing (never retried) ---
    "openai_quota": (429, {}, '{\n    "error": {\n        "message": "You exceeded your current quota, please check '
                     'your plan and billing details. For more information on this error, read the docs: '
                     'https://platform.openai.com/docs/guides/error-codes/api-errors.",\n        "type": '
                     '"insufficient_quota",\n        "param": null,\n        "code": "insufficient_quota"\n    }\n}\n'),
    "deepseek_balance": (402, {}, '{"error":{"message":"Insufficient Balance","type":"unknown_error","param":null,'
                         '"code":"invalid_request_error"}}'),
    "moonshot_suspended": (429, {}, '{"error":{"message":"Your account org-abc<ak-xyz> is suspended, please check '
                           'your plan and billing details","type":"exceeded_current_quota_error"}}'),
    "zhipu_arrears": (429, {}, '{"error":{"code":"1113","message":"您的账户已欠费，请充值后重试。"}}'),
    "openrouter_credits": (402, {}, '{"error":{"message":"This request requires more credits, or fewer max_tokens. '
                           'You requested up to 4096 tokens, but can only afford 1234. To increase, visit '
                           'https://openrouter.ai/settings/credits and upgrade to a paid account","code":402,'
                           '"metadata":{"provider_name":null}},"user_id":"user_2abc"}'),
    "dashscope_arrearage": (400, {}, '{"error":{"message":"Access denied, please make sure your account is in good '
                            'standing.","type":"Arrearage","param":null,"code":"Arrearage"},"request_id":"b7f0"}'),
    # --- authentication ---
    "openai_auth": (401, {}, '{"error":{"message":"Incorrect API key provided: sk-abc. You can find your API key at '
                    'https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,'
                    '"code":"invalid_api_key"}}'),
    "gemini_auth": (400, {}, '[{\n  "error": {\n    "code": 400,\n    "message": "API key not valid. Please pass a '
                    'valid API key.",\n    "status": "INVALID_ARGUMENT",\n    "details": [\n      {\n        '
                    '"@type": "type.googleapis.com/google.rpc.ErrorInfo",\n        "reason": "API_KEY_INVALID",\n'
                    '        "domain": "googleapis.com"\n      }\n    ]\n  }\n}\n]'),
    "moonshot_auth": (401, {}, '{"error":{"message":"Invalid Authentication","type":"invalid_authentication_error"}}'),
    # --- unknown model ---
    "openai_model": (404, {}, '{"error":{"message":"The model `gpt-9` does not exist or you do not have access to '
                     'it.","type":"invalid_request_error","param":null,"code":"model_not_found"}}'),
    "ollama_model": (404, {}, '{"error":{"message":"model \\"llama9\\" not found, try pulling it first","type":'
                     '"api_error","param":null,"code":null}}'),
    "azure_deployment": (404, {}, '{"error":{"code":"DeploymentNotFound","message":"The API deployment for this '
                         'resource does not exist. If you created the deployment within the last 5 minutes, please '
                         'wait a moment and try again."}}'),
    "zhipu_model": (400, {}, '{"error":{"code":"1211","message":"模型不存在，请检查模型代码。"}}'),
    # --- tools not available for this model ---
    "vllm_no_auto_tools": (400, {}, '{"object":"error","message":"\\"auto\\" tool choice requires '
                           '--enable-auto-tool-choice and --tool-call-parser to be set","type":"BadRequestError",'
                           '"param":null,"code":400}'),
    "ollama_no_tools": (400, {}, '{"error":{"message":"registry.ollama.ai/library/gemma3:4b does not support tools",'
                        '"type":"api_error","param":null,"code":null}}'),
    # --- other ---
    "openai_invalid": (400, {}, '{"error":{"message":"Invalid value for \'temperature\': expected a number between 0 '
                       'and 2.","type":"invalid_request_error","param":"temperature","code":"invalid_value"}}'),
    "proxy_html": (502, {"Content-Type": "text/html"}, '<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n'
                   '<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n'
                   '</body>\r\n</html>\r\n'),
    "error_in_200": (200, {}, '{"error":{"message":"Upstream error: the model is overloaded","code":"server_error"}}'),
}


#: SGLang's overflow inside a stream (HTTP 200): the ``error`` of its ``data: {"error": {...}}`` event
#: (serving_base.create_streaming_error_response), for ``FakeOpenAIServer.enqueue_stream(error=...)``.
SGLANG_STREAM_OVERFLOW: dict = {"object": "error", "message": "The input (150 tokens) is longer than the model's "
                                "context length (100 tokens).", "type": "BadRequestError", "param": None, "code": 400}
